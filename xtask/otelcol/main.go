// Program otelcol is the OpenTelemetry Collector the tests push OTLP to, and the
// cluster tier's real Unix-socket sidecar: what the collector builder (ocb) generates
// for a distribution of the OTLP receiver, the file exporter and the health_check
// extension (the readiness endpoint the collector's Helm chart probes), at one
// collector release (core v0.161.0 / v1.67.0, contrib v0.161.0). `cargo xtask setup` builds it (xtask/src/cluster/otelcol.rs) into
// ~/.cache/sidecar-race/go/otelcol-<version>-<distribution>/bin/otelcol; tests/kit/src/otelcol.rs runs it.
package main

import (
	"os"

	"github.com/open-telemetry/opentelemetry-collector-contrib/exporter/fileexporter"
	"github.com/open-telemetry/opentelemetry-collector-contrib/extension/healthcheckextension"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/provider/envprovider"
	"go.opentelemetry.io/collector/confmap/provider/fileprovider"
	"go.opentelemetry.io/collector/confmap/provider/yamlprovider"
	"go.opentelemetry.io/collector/connector"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/extension"
	"go.opentelemetry.io/collector/otelcol"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/service/telemetry/otelconftelemetry"
)

// version is set with -ldflags "-X main.version=..." by xtask.
var version = "v0.161.0"

func components() (otelcol.Factories, error) {
	var err error
	factories := otelcol.Factories{
		Telemetry: otelconftelemetry.NewFactory(),
	}
	if factories.Extensions, err = otelcol.MakeFactoryMap[extension.Factory](
		healthcheckextension.NewFactory(),
	); err != nil {
		return otelcol.Factories{}, err
	}
	factories.ExtensionModules = map[component.Type]string{
		healthcheckextension.NewFactory().Type(): "github.com/open-telemetry/opentelemetry-collector-contrib/extension/healthcheckextension v0.161.0",
	}
	if factories.Receivers, err = otelcol.MakeFactoryMap[receiver.Factory](
		otlpreceiver.NewFactory(),
	); err != nil {
		return otelcol.Factories{}, err
	}
	factories.ReceiverModules = map[component.Type]string{
		otlpreceiver.NewFactory().Type(): "go.opentelemetry.io/collector/receiver/otlpreceiver v0.161.0",
	}
	if factories.Exporters, err = otelcol.MakeFactoryMap[exporter.Factory](
		fileexporter.NewFactory(),
	); err != nil {
		return otelcol.Factories{}, err
	}
	factories.ExporterModules = map[component.Type]string{
		fileexporter.NewFactory().Type(): "github.com/open-telemetry/opentelemetry-collector-contrib/exporter/fileexporter v0.161.0",
	}
	if factories.Processors, err = otelcol.MakeFactoryMap[processor.Factory](); err != nil {
		return otelcol.Factories{}, err
	}
	if factories.Connectors, err = otelcol.MakeFactoryMap[connector.Factory](); err != nil {
		return otelcol.Factories{}, err
	}
	return factories, nil
}

func main() {
	set := otelcol.CollectorSettings{
		BuildInfo: component.BuildInfo{
			Command:     "otelcol",
			Description: "sidecar-race test collector (OTLP receiver, file exporter, health_check extension)",
			Version:     version,
		},
		Factories: components,
		ConfigProviderSettings: otelcol.ConfigProviderSettings{
			ResolverSettings: confmap.ResolverSettings{
				ProviderFactories: []confmap.ProviderFactory{
					envprovider.NewFactory(),
					fileprovider.NewFactory(),
					yamlprovider.NewFactory(),
				},
			},
		},
		ProviderModules: map[string]string{
			envprovider.NewFactory().Create(confmap.ProviderSettings{}).Scheme():  "go.opentelemetry.io/collector/confmap/provider/envprovider v1.67.0",
			fileprovider.NewFactory().Create(confmap.ProviderSettings{}).Scheme(): "go.opentelemetry.io/collector/confmap/provider/fileprovider v1.67.0",
			yamlprovider.NewFactory().Create(confmap.ProviderSettings{}).Scheme(): "go.opentelemetry.io/collector/confmap/provider/yamlprovider v1.67.0",
		},
	}
	// cobra has logged the error already.
	if err := otelcol.NewCommand(set).Execute(); err != nil {
		os.Exit(1)
	}
}
