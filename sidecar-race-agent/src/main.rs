use std::time::Duration;

use sidecar_race_agent::{
    cli::{self, Command},
    commands, logging,
};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = cli::parse_args(std::env::args_os().collect()).unwrap_or_else(|e| e.exit());
    // `report` says why a request failed in its one-sentence error; kube's client
    // would log each failed request too.
    let log_level = match cli.command {
        Command::Report(_) | Command::Lint(_) | Command::Timeline(_)
            if !cli.log_level.contains("kube") =>
        {
            format!("{},kube_client=off", cli.log_level)
        }
        _ => cli.log_level.clone(),
    };
    logging::init(cli.log_format, &log_level);
    let result = match cli.command {
        Command::Trace(args) => {
            use std::io::IsTerminal;
            commands::trace::run(
                args.kernel.options(),
                args.kind_set(),
                Duration::from_millis(args.attribution_wait_ms),
                commands::trace::View {
                    filter: args.filter(),
                    format: sidecar_race_agent::trace::view::TraceFormat::resolve(
                        args.format,
                        std::io::stdout().is_terminal(),
                    ),
                },
            )
            .await
        }
        Command::Run(args) => {
            commands::run::run(commands::run::RunOptions {
                agent: args.kernel.options(),
                metrics_pod_label: args.metrics_pod_label,
                max_series_per_metric: args.max_series_per_metric,
                series_ttl: args.series_ttl,
                auth: args.auth,
                events: args.events.then_some(args.events_per_minute),
                listen: args.listen,
                api_listen: args.api_listen,
                tls: args.tls_files(),
                stats_interval: Duration::from_secs(args.stats_interval_seconds.max(1)),
                detector: args.detector(),
                reorder_window: Duration::from_millis(args.reorder_window_ms),
                metadata_wait: Duration::from_secs_f64(args.metadata_wait_seconds.max(0.0)),
                // Not wired to `--state-dir` yet: no checkpoint, shutdown as before.
                checkpoint: args.state.checkpoint(),
                otlp: args
                    .otlp_endpoint
                    .map(|endpoint| commands::run::OtlpOptions {
                        endpoint,
                        interval: args.otlp_interval.max(Duration::from_secs(1)),
                        logs: args.otlp_logs,
                        cluster_name: args.cluster_name,
                    }),
                state: args.state,
            })
            .await
        }
        Command::Report(args) => commands::report::run(args).await,
        Command::Timeline(args) => commands::timeline::run(args).await,
        Command::Unpin(args) => commands::unpin::run(&args),
        Command::Lint(args) => match commands::lint::run(args).await {
            Ok(0) => Ok(()),
            Ok(code) => std::process::exit(code),
            Err(e) => Err(e),
        },
    };
    if let Err(e) = &result {
        tracing::error!("{e:#}");
        std::process::exit(1);
    }
    Ok(())
}
