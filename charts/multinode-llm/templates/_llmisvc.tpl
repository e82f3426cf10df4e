{{- /*
Presets for KServe's LLMInferenceService (llmInferenceServicePresets, docs/llmisvc.md). KServe makes
one LeaderWorkerSet of such a service (workload_multi_node.go): the preset's template is each
group's leader, our head, and its worker each of the other parallelism.pipeline - 1 pods. What a
service decides, KServe fills in through its Go template over the merged config (ReplaceVariables,
config_merge.go, every release with LLMInferenceService): the served name, the parallel sizes, the
service's name. It attaches the model at /mnt/models to the container named main itself, and the
service's own template sets the resources (its GPUs), as with KServe's own presets.
*/}}

{{- /* The name KServe looks the preset up by (configWorkerPipelineParallelName, config_merge.go).
Context: root. */}}
{{- define "multinode-llm.presetName" -}}
{{ .Values.llmInferenceServicePresets.namePrefix }}config-llm-worker-pipeline-parallel
{{- end }}

{{- /* The preset's spec: the head's pod and the workers'. Not the release's own model, sizes or
GPUs: each LLMInferenceService brings its own. The shared compile cache lives on the release's
model claim, which a service's pods do not have. Context: root. */}}
{{- define "multinode-llm.presetSpec" -}}
{{- $values := mergeOverwrite (deepCopy .Values) (dict "compileCache" (dict "shared" (dict "enabled" false))) }}
{{- $ctx := dict "Values" $values "Release" .Release "Chart" .Chart "Files" .Files "Capabilities" .Capabilities "Template" .Template }}
template:
  {{- include "multinode-llm.presetPodSpec" (dict "root" $ctx "role" "head") | nindent 2 }}
worker:
  {{- include "multinode-llm.presetPodSpec" (dict "root" $ctx "role" "worker") | nindent 2 }}
{{- end }}

{{- /* One pod spec of the preset. KServe's template syntax is written as text ({{`{{`}} ... ),
and the user's arguments and env are escaped as on the InferenceService: KServe executes the whole
config as a Go template. Context: dict "root" ctx "role" "head"|"worker". */}}
{{- define "multinode-llm.presetPodSpec" -}}
{{- $role := .role }}
{{- with .root }}
{{- $r := index .Values $role }}
{{- $llmisvc := (include "multinode-llm.kserveRelease" . | fromJson).llmInferenceService | default dict }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
containers:
  - name: main
    image: {{ include "multinode-llm.image" . }}
    imagePullPolicy: {{ .Values.image.pullPolicy }}
    command: ["multinode-llm"]
    {{- if eq $role "head" }}
    args:
      - head
      # KServe's Service of the workload targets 8000 (workload.go)
      - --port
      - "8000"
      - --served-model-name
      - "{{`{{ .Spec.Model.Name }}`}}"
      {{- if $llmisvc.tlsSwitch }}
      # KServe's certificate where its TLS is on; else empty names, which vLLM serves as plain HTTP
      - --ssl-certfile
      - "{{`{{ if .GlobalConfig.EnableTLS }}/var/run/kserve/tls/tls.crt{{ end }}`}}"
      - --ssl-keyfile
      - "{{`{{ if .GlobalConfig.EnableTLS }}/var/run/kserve/tls/tls.key{{ end }}`}}"
      {{- end }}
      {{- range .Values.vllm.args }}
      - {{ include "multinode-llm.kserveTemplateText" . | quote }}
      {{- end }}
    ports:
      - name: http
        containerPort: 8000
        protocol: TCP
      - name: status
        containerPort: 8081
        protocol: TCP
    {{- else }}
    args: ["worker"]
    ports:
      - name: status
        containerPort: 8081
        protocol: TCP
    {{- end }}
    env:
      {{- include "multinode-llm.groupEnv" . | nindent 6 }}
      # the service's parallelism, as KServe's own InferenceService controller injects it
      - name: PIPELINE_PARALLEL_SIZE
        value: "{{`{{ .Spec.Parallelism.Pipeline }}`}}"
      - name: TENSOR_PARALLEL_SIZE
        value: "{{`{{ or .Spec.Parallelism.Tensor 1 }}`}}"
      - name: RAY_NODE_COUNT
        value: "{{`{{ .Spec.Parallelism.Pipeline }}`}}"
      - name: REQUEST_GPU_COUNT
        value: "{{`{{ or .Spec.Parallelism.Tensor 1 }}`}}"
      {{- if eq $role "head" }}
      - name: MODEL_DIR
        value: /mnt/models
      - name: INFERENCE_SERVICE_NAME
        value: "{{`{{ .ObjectMeta.Name }}`}}"
      {{- else }}
      - name: ISVC_NAME
        value: "{{`{{ .ObjectMeta.Name }}`}}"
      {{- end }}
      {{- range $r.env }}
      {{- $var := deepCopy . }}
      {{- if hasKey $var "value" }}
      {{- $_ := set $var "value" (include "multinode-llm.kserveTemplateText" $var.value) }}
      {{- end }}
      - {{- toYaml $var | nindent 8 }}
      {{- end }}
    {{- include "multinode-llm.probes" (dict "probes" $r.probes) | nindent 4 }}
    securityContext:
      {{- include "multinode-llm.groupSecurityContext" . | nindent 6 }}
    volumeMounts:
      {{- include "multinode-llm.groupVolumeMounts" . | nindent 6 }}
      {{- if $llmisvc.tlsSwitch }}
      - name: tls-certs
        mountPath: /var/run/kserve/tls
        readOnly: true
      {{- end }}
volumes:
  {{- include "multinode-llm.groupVolumes" . | nindent 2 }}
  {{- if $llmisvc.tlsSwitch }}
  # the certificate KServe makes for the service (workload_tls_self_signed.go); optional, so that a
  # service with TLS off starts without it
  - name: tls-certs
    secret:
      secretName: "{{ "{{ ChildName .ObjectMeta.Name `-kserve-self-signed-certs` }}" }}"
      optional: true
  {{- end }}
{{- end }}
{{- end }} {{- /* define "multinode-llm.presetPodSpec" */}}

{{- /* The refusals of llmInferenceServicePresets, as a JSON array of messages. Context: root. */}}
{{- define "multinode-llm.validatePresets" -}}
{{- $p := .Values.llmInferenceServicePresets }}
{{- $errors := list }}
{{- if $p.enabled }}
{{- $release := include "multinode-llm.kserveRelease" . | fromJson }}
{{- $llmisvc := $release.llmInferenceService }}
{{- if and $release (not $llmisvc) }}
{{- $errors = append $errors (printf "llmInferenceServicePresets.enabled=true with kserve.version=%s: KServe %s has no LLMInferenceService (it came in 0.16.0); set kserve.version to the release installed, 0.16 or later, or leave the presets off" (toString $.Values.kserve.version) $release.version) }}
{{- else if and $llmisvc (not $llmisvc.prefixEnv) (ne $p.namePrefix "kserve-") }}
{{- $errors = append $errors (printf "llmInferenceServicePresets.namePrefix=%s: KServe %s looks presets up as kserve-config-... (LLM_INFERENCE_SERVICE_CONFIG_PREFIX came in 0.17.0); set namePrefix to kserve-" $p.namePrefix $release.version) }}
{{- end }}
{{- if and $llmisvc (eq $release.status "unverified") (not .Values.kserve.allowUnverifiedRelease) }}
{{- $errors = append $errors (printf "llmInferenceServicePresets.enabled=true with kserve.version=%s: %s If you accept that, set kserve.allowUnverifiedRelease=true (the presets are rendered as for KServe %s)" (toString $.Values.kserve.version) (first $release.defects).summary $release.renderAs) }}
{{- end }}
{{- end }}
{{- toJson $errors }}
{{- end }}
