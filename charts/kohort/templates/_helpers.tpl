{{/*
Names. Every resource name starts with the full name, so two releases in two namespaces never
collide on cluster-scoped objects (webhook configurations, ClusterRoles).
*/}}
{{- define "kohort.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kohort.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "kohort.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels on every object. */}}
{{- define "kohort.labels" -}}
helm.sh/chart: {{ include "kohort.chart" . }}
app.kubernetes.io/name: {{ include "kohort.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kohort
{{- end }}

{{/*
Selector labels of one component; call with (dict "root" $ "component" "webhook").
They never change between chart versions: Deployment selectors are immutable.
*/}}
{{- define "kohort.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kohort.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "kohort.componentLabels" -}}
{{ include "kohort.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "kohort.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{- define "kohort.controller.fullname" -}}
{{- printf "%s-controller" (include "kohort.fullname" .) }}
{{- end }}

{{- define "kohort.webhook.fullname" -}}
{{- printf "%s-webhook" (include "kohort.fullname" .) }}
{{- end }}

{{- define "kohort.controller.serviceAccountName" -}}
{{- default (include "kohort.controller.fullname" .) .Values.controller.serviceAccount.name }}
{{- end }}

{{- define "kohort.webhook.serviceAccountName" -}}
{{- default (include "kohort.webhook.fullname" .) .Values.webhook.serviceAccount.name }}
{{- end }}

{{/* The Secret holding the webhook's CA and serving certificate. */}}
{{- define "kohort.webhook.secretName" -}}
{{- printf "%s-tls" (include "kohort.webhook.fullname" .) }}
{{- end }}

{{/* Both webhook configurations (mutating and validating) carry this name. */}}
{{- define "kohort.webhook.configurationName" -}}
{{- include "kohort.fullname" . }}
{{- end }}

{{- define "kohort.certificateName" -}}
{{- printf "%s-serving" (include "kohort.webhook.fullname" .) }}
{{- end }}

{{/*
Namespaces no webhook ever sees: the system ones, the release namespace (the webhook's own pods
must never wait for the webhook) and webhook.excludedNamespaces. Sorted, as
webhook/registration.py sorts them.
*/}}
{{- define "kohort.webhook.namespaceSelector" -}}
{{- $excluded := concat (list "kube-system" "kube-node-lease" "kube-public" .Release.Namespace) .Values.webhook.excludedNamespaces | uniq | sortAlpha }}
matchExpressions:
  - key: kubernetes.io/metadata.name
    operator: NotIn
    values:
      {{- range $excluded }}
      - {{ . | quote }}
      {{- end }}
{{- end }}

{{/* Where the API server sends reviews for one path; call with (dict "root" $ "path" "/mutate"). */}}
{{- define "kohort.webhook.clientConfig" -}}
{{- if .root.Values.webhook.urlOverride }}
url: {{ printf "%s%s" (trimSuffix "/" .root.Values.webhook.urlOverride) .path | quote }}
{{- else }}
service:
  name: {{ include "kohort.webhook.fullname" .root }}
  namespace: {{ .root.Release.Namespace }}
  path: {{ .path }}
  port: 443
{{- end }}
{{- end }}

{{/*
The kinds the webhook holds as gangs, as webhook rules; call with
(dict "operations" (list ...) "podOperations" (list ...)). Pods are a kind of their own: a
scheduling gate can only be added when a pod is created.
*/}}
{{- define "kohort.webhook.workloadRules" -}}
{{- $operations := .operations }}
{{- range list (list "batch" "v1" "jobs") (list "apps" "v1" "statefulsets") (list "leaderworkerset.x-k8s.io" "v1" "leaderworkersets") (list "jobset.x-k8s.io" "v1alpha2" "jobsets") (list "kubeflow.org" "v1" "pytorchjobs") (list "ray.io" "v1" "rayclusters") (list "ray.io" "v1" "rayjobs") }}
- apiGroups: [{{ index . 0 | quote }}]
  apiVersions: [{{ index . 1 | quote }}]
  resources: [{{ index . 2 | quote }}]
  operations: {{ toJson $operations }}
  scope: Namespaced
{{- end }}
- apiGroups: [""]
  apiVersions: ["v1"]
  resources: ["pods"]
  operations: {{ toJson .podOperations }}
  scope: Namespaced
{{- end }}

{{/* Pod-level settings shared by both Deployments; call with (dict "root" $ "component" .Values.webhook). */}}
{{- define "kohort.podPlacement" -}}
{{- with .component.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .component.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .component.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .component.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* The Lease the controller replicas elect a leader with. */}}
{{- define "kohort.controller.leaseName" -}}
{{- include "kohort.controller.fullname" . }}
{{- end }}

{{/* Flags of `kohort controller` (controller/main.py). */}}
{{- define "kohort.controller.args" -}}
- controller
- --metrics-port={{ .Values.controller.metricsPort }}
- --health-port={{ .Values.controller.healthPort }}
- --backend={{ .Values.gangScheduler.backend }}
{{- with .Values.gangScheduler.schedulerName }}
- --scheduler-name={{ . }}
{{- end }}
{{- if eq .Values.gangScheduler.backend "volcano" }}
- --volcano-queue={{ .Values.controller.volcanoQueue }}
{{- end }}
- --wait-for-pods-ready={{ .Values.controller.waitForPodsReadySeconds }}
{{- with .Values.controller.namespaceSelector }}
- --namespace-selector={{ . }}
{{- end }}
{{- if not .Values.controller.placementCheck }}
- --no-placement-check
{{- end }}
- --waste-budget={{ .Values.controller.wasteBudget }}
- --starvation-after={{ .Values.controller.starvationAfterSeconds }}
- --usage-half-life={{ .Values.controller.usageHalfLifeSeconds }}
- --forecast-refresh={{ .Values.controller.forecastRefreshSeconds }}
- --forecast-arrivals={{ .Values.controller.forecastArrivalsSeconds }}
{{- if .Values.controller.starvationBackfill }}
- --starvation-backfill
{{- else }}
- --no-starvation-backfill
{{- end }}
{{- range $class, $resource := .Values.controller.deviceClasses }}
- --device-class={{ $class }}={{ $resource }}
{{- end }}
{{- if .Values.controller.leaderElection.enabled }}
- --leader-elect
- --leader-election-namespace={{ .Release.Namespace }}
- --leader-election-id={{ include "kohort.controller.leaseName" . }}
{{- else }}
- --no-leader-elect
{{- end }}
{{- end }}

{{- define "kohort.dashboard.fullname" -}}
{{- printf "%s-dashboard" (include "kohort.fullname" .) }}
{{- end }}

{{- define "kohort.dashboard.serviceAccountName" -}}
{{- default (include "kohort.dashboard.fullname" .) .Values.dashboard.serviceAccount.name }}
{{- end }}
