{{/* Names and labels. */}}
{{- define "tableservice.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "tableservice.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "tableservice.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "tableservice.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tableservice.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "tableservice.labels" -}}
helm.sh/chart: {{ include "tableservice.chart" . }}
{{ include "tableservice.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "tableservice.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "tableservice.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "tableservice.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/*
The configuration file: .Values.config with the keys the chart owns. Spark on Kubernetes adds spark.master and
the static spark.conf keys; spark.driver.host and spark.kubernetes.driver.pod.name come from environment
variables (see the Deployment).
*/}}
{{- define "tableservice.config" -}}
{{- $cfg := deepCopy (.Values.config | default dict) }}
{{- $http := dict "host" "0.0.0.0" "port" (int .Values.http.port) }}
{{- if .Values.http.statusTokenSecret.name }}
{{- $_ := set $http "status_token_file" "/var/run/tableservice/status-token/token" }}
{{- end }}
{{- $history := dict "path" "/var/lib/tableservice/history.sqlite" }}
{{- $cfg = mergeOverwrite $cfg (dict "service" (dict "http" $http "history" $history)) }}
{{- if .Values.spark.kubernetes.enabled }}
{{- $conf := dict
    "spark.kubernetes.namespace" .Release.Namespace
    "spark.kubernetes.container.image" (default (include "tableservice.image" .) .Values.spark.kubernetes.image)
    "spark.driver.port" (toString (int .Values.spark.kubernetes.driverPort))
    "spark.blockManager.port" (toString (int .Values.spark.kubernetes.blockManagerPort))
    "spark.driver.bindAddress" "0.0.0.0"
    "spark.kubernetes.executor.podTemplateFile" "/etc/tableservice/executor-pod-template.yaml" }}
{{- $cfg = mergeOverwrite $cfg (dict "spark" (dict "master" "k8s://https://kubernetes.default.svc" "conf" $conf)) }}
{{- end }}
{{- toYaml $cfg }}
{{- end }}
