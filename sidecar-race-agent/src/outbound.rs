//! HTTP(S) clients for endpoints that are not the API server (a Prometheus, an agent,
//! an OpenTelemetry collector), on kube's client stack (hyper + rustls, already a
//! dependency) with connect and read timeouts: one way to check a base URL and build
//! the client, for `report` and the OTLP export.

use std::time::Duration;

/// A client for base URL `url` (`http://host:port` or `https://host:port`, with an
/// optional path prefix, no query string), sending `token` as a bearer token when
/// given. `Err`: why the URL cannot be used.
pub fn client(
    url: &str,
    connect_timeout: Duration,
    read_timeout: Duration,
    token: Option<&str>,
) -> Result<kube::Client, String> {
    let uri: http::Uri = url.parse().map_err(|e| format!("{e}"))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.authority().is_none() {
        return Err("expected http://host:port or https://host:port".into());
    }
    if uri.query().is_some() {
        return Err("a base URL has no query string".into());
    }
    let mut config = kube::Config::new(uri);
    config.connect_timeout = Some(connect_timeout);
    config.read_timeout = Some(read_timeout);
    config.auth_info.token = token.map(|t| t.to_string().into());
    kube::Client::try_from(config).map_err(|e| e.to_string())
}
