{{/*
The labels every object of deploy/ carries. Not Helm's usual helm.sh/chart and
managed-by labels: the defaults render exactly deploy/'s objects (tests/tests/helm_chart.rs),
and Helm tracks its objects by its own annotations.
*/}}
{{- define "sidecar-race.labels" -}}
app.kubernetes.io/name: sidecar-race-agent
app.kubernetes.io/part-of: sidecar-race
{{- with .component }}
app.kubernetes.io/component: {{ . }}
{{- end }}
{{- end }}

{{/* The agent pods' selector: the one label that never changes. */}}
{{- define "sidecar-race.selector" -}}
app.kubernetes.io/name: sidecar-race-agent
{{- end }}

{{- define "sidecar-race.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion -}}
{{- $repository := .Values.image.repository -}}
{{- with (.Values.global).imageRegistry -}}
{{- $repository = printf "%s/%s" (trimSuffix "/" .) $repository -}}
{{- end -}}
{{- if .Values.image.digest -}}
{{ $repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ $repository }}:{{ $tag }}
{{- end -}}
{{- end }}

{{/* The agent's arguments: fixed ones, then `flags` in name order. */}}
{{- define "sidecar-race.args" -}}
{{- $args := list "run" "--listen" (printf "0.0.0.0:%v" .Values.port) "--pods-from" .Values.podSource -}}
{{- if .Values.auth -}}
{{- $args = concat $args (list "--auth" .Values.auth) -}}
{{- end -}}
{{- range $name, $value := .Values.flags -}}
{{- if eq (toString $value) "true" -}}
{{- $args = append $args (printf "--%s" $name) -}}
{{- else -}}
{{- $args = append $args (printf "--%s=%v" $name $value) -}}
{{- end -}}
{{- end -}}
{{- toJson $args -}}
{{- end }}

{{/* One scrape endpoint of the PodMonitor or ServiceMonitor: job and node labels
as the rules and dashboard assume. */}}
{{- define "sidecar-race.scrapeEndpoint" -}}
- port: http-metrics
  path: /metrics
  interval: 30s
  honorLabels: true
  {{- if .Values.tls.enabled }}
  scheme: https
  tlsConfig:
    ca:
      secret:
        name: {{ .Values.tls.secretName }}
        key: ca.crt
    serverName: {{ include "sidecar-race.tlsServerName" . }}
  {{- end }}
  {{- if eq .Values.auth "kubernetes" }}
  authorization:
    type: Bearer
    credentials:
      name: sidecar-race-scraper-token
      key: token
  {{- end }}
  relabelings:
  - action: replace
    sourceLabels: [__meta_kubernetes_pod_node_name]
    targetLabel: node
{{- end }}

{{/* The name the monitors verify the agents' certificate for: the headless Service's. */}}
{{- define "sidecar-race.tlsServerName" -}}
sidecar-race-agent.{{ .Values.namespace.name }}.svc
{{- end }}

{{/* The DNS names of the agents' certificate (helm and cert-manager sources). */}}
{{- define "sidecar-race.tlsDnsNames" -}}
{{- $ns := .Values.namespace.name -}}
{{- list "sidecar-race-agent" (printf "sidecar-race-agent.%s" $ns) (printf "sidecar-race-agent.%s.svc" $ns) (printf "sidecar-race-agent.%s.svc.cluster.local" $ns) | toJson -}}
{{- end }}

{{/* tls.source must be one the chart knows. */}}
{{- define "sidecar-race.tlsCheck" -}}
{{- if and .Values.tls.enabled (not (has .Values.tls.source (list "secret" "helm" "cert-manager"))) -}}
{{- fail (printf "tls.source is %q: expected secret, helm or cert-manager" .Values.tls.source) -}}
{{- end -}}
{{- end }}

{{/* The `helm test` objects' labels. Not the agents' name label: the DaemonSet would
adopt (and delete) a pod that carries its selector, and the report would take it for
an agent. */}}
{{- define "sidecar-race.testLabels" -}}
app.kubernetes.io/name: sidecar-race-test
app.kubernetes.io/part-of: sidecar-race
app.kubernetes.io/component: test
{{- end }}
