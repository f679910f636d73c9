{{/* Names and labels shared by every object of the chart. */}}

{{- define "space.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "space.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* selector labels of one component: include "space.selector" (list . "node") */}}
{{- define "space.selector" -}}
app.kubernetes.io/name: {{ (index . 0).Chart.Name }}
app.kubernetes.io/instance: {{ (index . 0).Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "space.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "space.secretName" -}}
{{- .Values.existingSecret | default (printf "%s-secrets" (include "space.fullname" .)) -}}
{{- end -}}

{{- define "space.dsnSecretName" -}}
{{- if .Values.postgresql.enabled -}}
{{- .Values.postgresql.existingSecret | default (printf "%s-postgresql" (include "space.fullname" .)) -}}
{{- else -}}
{{- required "postgresql.enabled is false: set externalDatabase.existingSecret to a Secret holding the PostgreSQL URL" .Values.externalDatabase.existingSecret -}}
{{- end -}}
{{- end -}}

{{- define "space.dsnSecretKey" -}}
{{- if .Values.postgresql.enabled -}}dsn{{- else -}}{{ .Values.externalDatabase.key }}{{- end -}}
{{- end -}}

{{/* The control plane's Service, which the nodes register with. */}}
{{- define "space.controlPlaneURL" -}}
http://{{ include "space.fullname" . }}-api.{{ .Release.Namespace }}.svc:{{ .Values.service.apiPort }}
{{- end -}}

{{/*
A generated secret value, kept across upgrades: the value given, else the
one the live Secret holds, else a new random one.
include "space.keep" (dict "root" . "secret" NAME "key" KEY "given" V "new" NEW)
*/}}
{{- define "space.keep" -}}
{{- if .given -}}
{{- .given -}}
{{- else -}}
{{- $live := lookup "v1" "Secret" .root.Release.Namespace .secret -}}
{{- if and $live $live.data (hasKey $live.data .key) -}}
{{- index $live.data .key | b64dec -}}
{{- else -}}
{{- .new -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
What the pods' secrets are made from, hashed: a changed given token, key or
Secret name rolls the pods. Not the rendered Secret: its generated values
render differently in the install's second rendering and the upgrade's,
and would roll every pod on the first upgrade.
*/}}
{{- define "space.secretChecksum" -}}
{{- list .Values.clusterToken .Values.adminKey .Values.existingSecret .Values.postgresql.password .Values.postgresql.existingSecret .Values.externalDatabase | toJson | sha256sum -}}
{{- end -}}
