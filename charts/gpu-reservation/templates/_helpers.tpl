{{- /* Names, labels and shared pieces of the chart. */ -}}

{{- define "gpu-reservation.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- /* The prefix of every object name: the release name when it already contains the
chart name (the usual `helm install gpu-reservation ...`), else <release>-<chart>. */ -}}
{{- define "gpu-reservation.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "gpu-reservation.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- /* Object names, one place for each. */ -}}
{{- define "gpu-reservation.webhook.name" -}}{{ include "gpu-reservation.fullname" . }}-webhook{{- end }}
{{- define "gpu-reservation.reconciler.name" -}}{{ include "gpu-reservation.fullname" . }}-reconciler{{- end }}
{{- define "gpu-reservation.certs.name" -}}{{ include "gpu-reservation.fullname" . }}-certs{{- end }}
{{- define "gpu-reservation.servingSecret" -}}{{ include "gpu-reservation.webhook.name" . }}-tls{{- end }}
{{- define "gpu-reservation.caSecret" -}}{{ include "gpu-reservation.servingSecret" . }}-ca{{- end }}
{{- define "gpu-reservation.webhookConfiguration" -}}{{ include "gpu-reservation.fullname" . }}{{- end }}
{{- define "gpu-reservation.webhook.hookName" -}}
{{- include "gpu-reservation.vocab.PRODUCT_NAME" . }}.{{ include "gpu-reservation.vocab.CRD_GROUP" . }}
{{- end }}

{{- /* The four DNS names of the webhook Service; the serving certificate carries all. */ -}}
{{- define "gpu-reservation.webhook.dnsNames" -}}
{{- $svc := include "gpu-reservation.webhook.name" . }}
- {{ $svc }}
- {{ $svc }}.{{ .Release.Namespace }}
- {{ $svc }}.{{ .Release.Namespace }}.svc
- {{ $svc }}.{{ .Release.Namespace }}.svc.{{ .Values.clusterDomain }}
{{- end }}

{{- define "gpu-reservation.labels" -}}
helm.sh/chart: {{ include "gpu-reservation.chart" . }}
app.kubernetes.io/name: {{ include "gpu-reservation.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: {{ include "gpu-reservation.vocab.PRODUCT_NAME" . }}
{{- end }}

{{- /* Labels of one component: call with (dict "ctx" $ "component" "webhook"). */ -}}
{{- define "gpu-reservation.componentLabels" -}}
{{ include "gpu-reservation.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "gpu-reservation.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpu-reservation.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "gpu-reservation.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- /* The service account usernames the webhook treats as the controller's own. */ -}}
{{- define "gpu-reservation.controllerAccounts" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ include "gpu-reservation.reconciler.name" . }}
{{- end }}

{{- /* Environment both processes read (shared/settings.py read_common + logging). */ -}}
{{- define "gpu-reservation.commonEnv" -}}
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: LOG_LEVEL
  value: {{ .Values.logging.level | quote }}
- name: LIBRARY_LOG_LEVEL
  value: {{ .Values.logging.libraryLevel | quote }}
{{- with .Values.timezone }}
- name: TZ
  value: {{ . | quote }}
{{- end }}
{{- with .Values.eventDisplayTimezone }}
- name: EVENT_DISPLAY_TIMEZONE
  value: {{ . | quote }}
{{- end }}
- name: K8S_TLS_STRICT_VERIFY
  value: {{ .Values.kubernetesApi.tlsStrictVerify | quote }}
{{- end }}

{{- /* Matching rules both the webhook and the reconciler apply (shared MatchRules). */ -}}
{{- define "gpu-reservation.matchingEnv" -}}
{{- with .Values.matching.requiredGroupLabel }}
- name: REQUIRED_GROUP_LABEL
  value: {{ . | quote }}
{{- end }}
{{- with .Values.matching.defaultUsageGroup }}
- name: DEFAULT_USAGE_GROUP
  value: {{ . | quote }}
{{- end }}
- name: DEFAULT_MINIMUM_RUNTIME_SECONDS
  value: {{ .Values.matching.defaultMinimumRuntimeSeconds | int | quote }}
{{- with .Values.matching.podSchedulingGateName }}
- name: POD_SCHEDULING_GATE_NAME
  value: {{ . | quote }}
{{- end }}
- name: BEST_EFFORT_ENABLED
  value: {{ .Values.matching.bestEffortEnabled | quote }}
- name: ONDEMAND_LEASE_ENABLED
  value: {{ .Values.onDemand.leaseEnabled | quote }}
- name: ONDEMAND_HORIZON_MINUTES
  value: {{ .Values.onDemand.horizonMinutes | int | quote }}
{{- end }}

{{- define "gpu-reservation.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .Values.securityContext.runAsUser | int }}
runAsGroup: {{ .Values.securityContext.runAsGroup | int }}
fsGroup: {{ .Values.securityContext.runAsGroup | int }}
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "gpu-reservation.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .Values.securityContext.runAsUser | int }}
runAsGroup: {{ .Values.securityContext.runAsGroup | int }}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
privileged: false
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- /*
A probe's timings from values (webhook.probes.*, reconciler.probes.*), in the order
the Kubernetes API documents them; a timing left out keeps the kubelet's default.
*/ -}}
{{- define "gpu-reservation.probeTimings" -}}
{{- $probe := . | default dict }}
{{- $lines := list }}
{{- range $key := list "initialDelaySeconds" "periodSeconds" "timeoutSeconds" "successThreshold" "failureThreshold" }}
{{- if hasKey $probe $key }}
{{- $lines = append $lines (printf "%s: %d" $key (index $probe $key | int)) }}
{{- end }}
{{- end }}
{{- join "\n" $lines }}
{{- end }}
