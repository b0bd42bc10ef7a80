module sidecar-race.local/grafana-schema

go 1.24.0

require github.com/grafana/grafana-foundation-sdk/go v0.0.22
