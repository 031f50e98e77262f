{{/* Labels of every object: kustomize's (app.kubernetes.io/part-of) and commonLabels. */}}
{{- define "holdfast.partOf" -}}
app.kubernetes.io/part-of: holdfast
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Labels of the objects of manifests/components (kustomize adds part-of to the base only). */}}
{{- define "holdfast.componentLabels" -}}
{{- with .Values.commonLabels }}
{{- toYaml . }}
{{- end }}
{{- end }}

{{- define "holdfast.protected" -}}
holdfast.dev/protected: "Always"
{{- end }}

{{/* metadata.labels of a base object: protected, part of holdfast. */}}
{{- define "holdfast.baseLabels" -}}
{{ include "holdfast.protected" . }}
{{ include "holdfast.partOf" . }}
{{- end }}

{{- define "holdfast.image" -}}
{{- $root := index . 0 -}}
{{- $name := index . 1 -}}
{{ $root.Values.image.registry }}/{{ $name }}:{{ $root.Values.image.tag | default $root.Chart.AppVersion }}
{{- end }}

{{/* The flags both binaries share (those not at their defaults). */}}
{{- define "holdfast.sharedArgs" -}}
- --topology={{ .Values.topology }}
{{- if .Values.strict }}
- --strict
{{- end }}
{{- range .Values.protectionLabels }}
- --protection-label={{ . }}
{{- end }}
{{- if ne .Values.logFormat "text" }}
- --log-format={{ .Values.logFormat }}
{{- end }}
{{- if ne .Values.apiExport "holdfast.dev" }}
- --apiexport={{ .Values.apiExport }}
{{- end }}
{{- if .Values.virtualWorkspaceKubeconfigSecret }}
- --virtual-workspace-kubeconfig=/etc/holdfast-vw/kubeconfig
{{- end }}
{{- end }}

{{/* Volume mounts for the shared kubeconfig Secrets of one binary ("controller" or "webhook"). */}}
{{- define "holdfast.kubeconfigMounts" -}}
{{- $root := index . 0 -}}
{{- $who := index . 1 -}}
{{- if index $root.Values.kubeconfigSecret $who }}
- {name: kubeconfig, mountPath: /etc/holdfast-kubeconfig, readOnly: true}
{{- end }}
{{- if $root.Values.virtualWorkspaceKubeconfigSecret }}
- {name: virtual-workspace-kubeconfig, mountPath: /etc/holdfast-vw, readOnly: true}
{{- end }}
{{- end }}

{{- define "holdfast.kubeconfigVolumes" -}}
{{- $root := index . 0 -}}
{{- $who := index . 1 -}}
{{- with index $root.Values.kubeconfigSecret $who }}
- name: kubeconfig
  secret: {secretName: {{ . }}}
{{- end }}
{{- with $root.Values.virtualWorkspaceKubeconfigSecret }}
- name: virtual-workspace-kubeconfig
  secret: {secretName: {{ . }}}
{{- end }}
{{- end }}

{{/* Pod scheduling and pull settings of one binary's values. */}}
{{- define "holdfast.podExtras" -}}
{{- $root := index . 0 -}}
{{- $v := index . 1 -}}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
{{ toYaml . }}
{{- end }}
{{- with $v.nodeSelector }}
nodeSelector:
{{ toYaml . | indent 2 }}
{{- end }}
{{- with $v.tolerations }}
tolerations:
{{ toYaml . }}
{{- end }}
{{- with $v.affinity }}
affinity:
{{ toYaml . | indent 2 }}
{{- end }}
{{- end }}
