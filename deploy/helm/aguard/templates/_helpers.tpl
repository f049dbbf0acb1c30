{{/* The name of every object: the release name, with the chart's unless it holds it already. */}}
{{- define "aguard.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels that select aguard's pods. */}}
{{- define "aguard.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: proxy
{{- end -}}

{{/* Labels of every object. */}}
{{- define "aguard.labels" -}}
{{ include "aguard.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The port of a listen address (host:port, [v6]:port). */}}
{{- define "aguard.port" -}}
{{- $parts := splitList ":" . -}}
{{- last $parts | int -}}
{{- end -}}

{{/* The Secret holding admin-token and webhook-secret, or "" when there is none. */}}
{{- define "aguard.secretName" -}}
{{- if .Values.secrets.existingSecret -}}
{{- .Values.secrets.existingSecret -}}
{{- else if or .Values.secrets.adminToken .Values.secrets.webhookSecret -}}
{{- include "aguard.fullname" . -}}
{{- end -}}
{{- end -}}

{{/* "true" when the replicas share a Redis. */}}
{{- define "aguard.sharedLedger" -}}
{{- if or .Values.redis.url .Values.redis.existingSecret }}true{{ end -}}
{{- end -}}

{{/* "true" when more than one pod may run. */}}
{{- define "aguard.replicated" -}}
{{- if or .Values.autoscaling.enabled (gt (int .Values.replicaCount) 1) }}true{{ end -}}
{{- end -}}

{{/* The policy ConfigMap, or "" for the built-in default policy. */}}
{{- define "aguard.policyConfigMap" -}}
{{- if .Values.policy.existingConfigMap -}}
{{- .Values.policy.existingConfigMap -}}
{{- else if .Values.policy.files -}}
{{- printf "%s-policy" (include "aguard.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/*
The --config file: every non-empty setting of .Values.config (but the listen
addresses, passed as flags), redis.url, and routes.
*/}}
{{- define "aguard.configFile" -}}
{{- $out := dict -}}
{{- range $k, $v := .Values.config -}}
{{- if and (not (has $k (list "routes" "listen" "admin-listen"))) (not (kindIs "invalid" $v)) (or (kindIs "bool" $v) (kindIs "float64" $v) (kindIs "int64" $v) (kindIs "int" $v) $v) -}}
{{- $_ := set $out $k $v -}}
{{- end -}}
{{- end -}}
{{- with .Values.config.routes -}}
{{- $_ := set $out "routes" . -}}
{{- end -}}
{{- if and .Values.redis.url (not .Values.redis.existingSecret) -}}
{{- $_ := set $out "redis" .Values.redis.url -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/* The Secret holding the --admin-tokens file, or "" when there is none. */}}
{{- define "aguard.reviewersSecret" -}}
{{- if .Values.reviewers.existingSecret -}}
{{- .Values.reviewers.existingSecret -}}
{{- else if .Values.reviewers.list -}}
{{- printf "%s-reviewers" (include "aguard.fullname" .) -}}
{{- end -}}
{{- end -}}
