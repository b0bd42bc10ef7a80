#!/bin/sh
# Writes prometheusrule.yaml from rules.yaml, the one source of truth for the rules:
# a PrometheusRule header, then rules.yaml indented under `spec:` (comments kept).
# Run after editing rules.yaml; tests/tests/deploy_manifests.rs fails until you do.
set -eu
cd "$(dirname "$0")"
{
	cat <<'HEADER'
# GENERATED from rules.yaml by generate-prometheusrule.sh: edit rules.yaml, then run
# `sh deploy/monitoring/generate-prometheusrule.sh`.
#
# The Prometheus Operator loads it if its Prometheus' ruleSelector matches these
# labels: add the label yours selects (kube-prometheus-stack: `release: <its release>`)
# in an overlay or here.
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: sidecar-race
  namespace: sidecar-race
  labels:
    app.kubernetes.io/name: sidecar-race-agent
    app.kubernetes.io/part-of: sidecar-race
    app.kubernetes.io/component: monitoring
spec:
HEADER
	# Indent every non-empty line by two spaces.
	sed -e 's/^\(..*\)$/  \1/' rules.yaml
} > prometheusrule.yaml.tmp
mv prometheusrule.yaml.tmp prometheusrule.yaml
