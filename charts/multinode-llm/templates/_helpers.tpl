{{- /*
Helpers of the multinode-llm chart. Every helper is prefixed with the chart name; the comment above
each define says what context it takes. Cross-field rules live in one place: "multinode-llm.validate".
*/}}

{{- /* Chart name, at most 63 characters. Context: root. */}}
{{- define "multinode-llm.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- /* Full name of the InferenceService and of every object. Never truncated: validate refuses
names KServe cannot derive its own names from. Context: root. */}}
{{- define "multinode-llm.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name }}
{{- end }}
{{- end }}
{{- end }} {{- /* define "multinode-llm.fullname" */}}

{{- /* name-version for the helm.sh/chart label. Context: root. */}}
{{- define "multinode-llm.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- /* Labels that select this release's objects. Context: root. */}}
{{- define "multinode-llm.selectorLabels" -}}
app.kubernetes.io/name: {{ include "multinode-llm.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- /* Standard labels of every object. Context: root. */}}
{{- define "multinode-llm.labels" -}}
helm.sh/chart: {{ include "multinode-llm.chart" . }}
{{ include "multinode-llm.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: multinode-llm
{{- end }}

{{- /* Runtime image reference; a digest pins it. Context: root. */}}
{{- define "multinode-llm.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if .Values.image.digest }}
{{- printf "%s:%s@%s" .Values.image.repository $tag .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{- /* Name clients send as "model" (--served-model-name). Context: root. */}}
{{- define "multinode-llm.servedModelName" -}}
{{- default .Release.Name .Values.model.name }}
{{- end }}

{{- /* Name of the (Cluster)ServingRuntime. Context: root. */}}
{{- define "multinode-llm.runtimeName" -}}
{{- default (include "multinode-llm.fullname" .) .Values.runtime.name }}
{{- end }}

{{- /* Label KServe puts on the head and the worker pods of this InferenceService. Context: root. */}}
{{- define "multinode-llm.groupSelector" -}}
serving.kserve.io/inferenceservice: {{ include "multinode-llm.fullname" . }}
{{- end }}

{{- /* kserve.version as MAJOR.MINOR.PATCH (patch 0 when not given), for semverCompare. Context: root. */}}
{{- define "multinode-llm.kserveVersion" -}}
{{- $v := trimPrefix "v" (toString .Values.kserve.version) }}
{{- if eq (len (splitList "." $v)) 2 }}
{{- printf "%s.0" $v }}
{{- else }}
{{- $v }}
{{- end }}
{{- end }}

{{- /* The autoscaler class KServe requires for multi-node: "external" in 0.15.0 only, "none" from
0.15.1 (a bare "0.15" means the 0.15.1+ line). Context: root. */}}
{{- define "multinode-llm.requiredAutoscalerClass" -}}
{{- if eq (trimPrefix "v" (toString .Values.kserve.version)) "0.15.0" }}external{{ else }}none{{ end }}
{{- end }}

{{- /* Scheme of model.uri ("hf", "pvc", "oci", ...). Context: root. */}}
{{- define "multinode-llm.modelScheme" -}}
{{- if contains "://" .Values.model.uri }}{{ first (splitList "://" .Values.model.uri) }}{{ end }}
{{- end }}

{{- /* hf://ORG/NAME[:REVISION]; the revision may not hold "/" (KServe's storage initializer splits on it). */}}
{{- define "multinode-llm.hfPattern" -}}
^hf://([A-Za-z0-9][A-Za-z0-9._-]*)/([A-Za-z0-9][A-Za-z0-9._-]*)(:([A-Za-z0-9][A-Za-z0-9._-]*))?$
{{- end }}

{{- /* Parts of an hf:// URI as a dict {org, name, revision}. Context: root. */}}
{{- define "multinode-llm.hfParts" -}}
{{- $re := include "multinode-llm.hfPattern" . }}
{{- $rev := regexReplaceAll $re .Values.model.uri "${4}" }}
{{- dict "org" (regexReplaceAll $re .Values.model.uri "${1}") "name" (regexReplaceAll $re .Values.model.uri "${2}") "revision" (default "main" $rev) | toJson }}
{{- end }}

{{- /* True ("true") when the chart stages an hf:// model onto a volume. Context: root. */}}
{{- define "multinode-llm.stagesModel" -}}
{{- if eq (include "multinode-llm.modelScheme" .) "hf" }}true{{ end }}
{{- end }}

{{- /* True when the chart creates the model volume (hf:// without an existing claim). Context: root. */}}
{{- define "multinode-llm.createsClaim" -}}
{{- if and (include "multinode-llm.stagesModel" .) (not .Values.model.storage.existingClaim) }}true{{ end }}
{{- end }}

{{- /* Claim an hf:// model is staged into. Context: root. */}}
{{- define "multinode-llm.modelClaim" -}}
{{- default (printf "%s-model" (include "multinode-llm.fullname" .)) .Values.model.storage.existingClaim }}
{{- end }}

{{- /* Folder inside the claim for an hf:// model. Context: root. */}}
{{- define "multinode-llm.modelPath" -}}
{{- if .Values.model.storage.path }}
{{- .Values.model.storage.path }}
{{- else }}
{{- $hf := include "multinode-llm.hfParts" . | fromJson }}
{{- printf "models/%s/%s/%s" $hf.org $hf.name $hf.revision }}
{{- end }}
{{- end }}

{{- /* storageUri of the InferenceService: the staged copy for hf://, model.uri otherwise. Context: root. */}}
{{- define "multinode-llm.storageUri" -}}
{{- if include "multinode-llm.stagesModel" . }}
{{- printf "pvc://%s/%s" (include "multinode-llm.modelClaim" .) (include "multinode-llm.modelPath" .) }}
{{- else }}
{{- .Values.model.uri }}
{{- end }}
{{- end }}

{{- /* The GPU types KServe knows without the gpu-resource-types annotation. */}}
{{- define "multinode-llm.standardGpuTypes" -}}
nvidia.com/gpu amd.com/gpu intel.com/gpu habana.ai/gaudi
{{- end }}

{{- /* The gpu-resource-types annotation (JSON array), empty without custom types. Context: root. */}}
{{- define "multinode-llm.gpuTypesAnnotation" -}}
{{- with .Values.gpu.customResourceTypes -}}
serving.kserve.io/gpu-resource-types: {{ toJson . | squote }}
{{- end }}
{{- end }}

{{- /* Resources of a head or worker container: the user's CPU/memory plus exactly
parallelism.tensor GPUs as request and limit, so that every KServe version computes
nodes = parallelism.pipeline. Context: dict "root" $ "role" "head"|"worker". */}}
{{- define "multinode-llm.groupResources" -}}
{{- $root := .root }}
{{- $res := deepCopy (index $root.Values .role "resources" | default dict) }}
{{- $gpus := int $root.Values.parallelism.tensor }}
{{- $_ := set $res "requests" (merge (dict $root.Values.gpu.resourceName $gpus) ($res.requests | default dict)) }}
{{- $_ = set $res "limits" (merge (dict $root.Values.gpu.resourceName $gpus) ($res.limits | default dict)) }}
{{- toYaml $res }}
{{- end }} {{- /* define "multinode-llm.groupResources" */}}

{{- /* Environment the chart declares on head and worker containers (the runtime contract in
DEVELOPERS.md). KServe injects the parallel sizes, node count and service names itself. Context: root. */}}
{{- define "multinode-llm.groupEnv" -}}
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: RAY_PORT
  value: {{ .Values.ray.port | int | quote }}
- name: GROUP_WAIT_TIMEOUT
  value: {{ .Values.group.waitTimeoutSeconds | int | quote }}
{{- with .Values.communication.socketIfname }}
- name: NCCL_SOCKET_IFNAME
  value: {{ . | quote }}
- name: GLOO_SOCKET_IFNAME
  value: {{ . | quote }}
{{- end }}
{{- with .Values.communication.ncclDebug }}
- name: NCCL_DEBUG
  value: {{ . | quote }}
{{- end }}
{{- if .Values.communication.ncclIbDisable }}
- name: NCCL_IB_DISABLE
  value: "1"
{{- end }}
# The root filesystem is read-only: caches (vLLM, Triton, torch, Hugging Face) go under HOME on /tmp.
- name: HOME
  value: /tmp
- name: VLLM_NO_USAGE_STATS
  value: "1"
- name: RAY_USAGE_STATS_ENABLED
  value: "0"
{{- end }} {{- /* define "multinode-llm.groupEnv" */}}

{{- /* HTTP probes on the supervisor's status port 8081. Context: dict "probes" <head|worker>.probes. */}}
{{- define "multinode-llm.probes" -}}
startupProbe:
  httpGet:
    path: /startup
    port: 8081
  {{- toYaml .probes.startup | nindent 2 }}
readinessProbe:
  httpGet:
    path: /ready
    port: 8081
  {{- toYaml .probes.readiness | nindent 2 }}
livenessProbe:
  httpGet:
    path: /live
    port: 8081
  {{- toYaml .probes.liveness | nindent 2 }}
{{- end }}

{{- /* Mounts of head and worker containers. */}}
{{- define "multinode-llm.groupVolumeMounts" -}}
- name: shm
  mountPath: /dev/shm
- name: scratch
  mountPath: /tmp
{{- end }}

{{- /* Volumes of head and worker pods: /dev/shm in memory, sized by shm.sizeLimit; a writable /tmp. Context: root. */}}
{{- define "multinode-llm.groupVolumes" -}}
- name: shm
  emptyDir:
    medium: Memory
    sizeLimit: {{ .Values.shm.sizeLimit }}
- name: scratch
  emptyDir:
    sizeLimit: {{ .Values.scratch.sizeLimit }}
{{- end }}

{{- /* Environment names users may not set in head.env / worker.env, each with what to set instead. */}}
{{- define "multinode-llm.reservedEnv" -}}
{{- dict
  "PIPELINE_PARALLEL_SIZE" "set parallelism.pipeline instead (KServe injects it and rejects it in env)"
  "TENSOR_PARALLEL_SIZE" "set parallelism.tensor instead (KServe injects it and rejects it in env)"
  "RAY_NODE_COUNT" "KServe computes it from parallelism.pipeline"
  "REQUEST_GPU_COUNT" "KServe computes it from parallelism.tensor"
  "MODEL_NAME" "KServe sets it to the InferenceService name; set model.name for the served name"
  "MODEL_DIR" "KServe sets it from model.uri"
  "HEAD_SVC" "KServe sets it"
  "WORKER_SVC" "KServe sets it"
  "ISVC_NAME" "KServe sets it"
  "POD_IP" "the chart sets it from the downward API"
  "POD_NAME" "the chart sets it from the downward API"
  "POD_NAMESPACE" "the chart sets it from the downward API"
  "RAY_PORT" "set ray.port instead"
  "GROUP_WAIT_TIMEOUT" "set group.waitTimeoutSeconds instead"
  "NCCL_SOCKET_IFNAME" "set communication.socketIfname instead"
  "GLOO_SOCKET_IFNAME" "set communication.socketIfname instead"
  "NCCL_DEBUG" "set communication.ncclDebug instead"
  "NCCL_IB_DISABLE" "set communication.ncclIbDisable instead"
  "HOME" "the chart points it at the writable /tmp"
  "PYTHONPATH" "KServe refuses it for security reasons"
  | toJson }}
{{- end }}

{{- /* vLLM flags the chart or the runtime own, each with what to set instead. */}}
{{- define "multinode-llm.reservedVllmFlags" -}}
{{- dict
  "--tensor-parallel-size" "set parallelism.tensor"
  "-tp" "set parallelism.tensor"
  "--pipeline-parallel-size" "set parallelism.pipeline"
  "-pp" "set parallelism.pipeline"
  "--served-model-name" "set model.name"
  "--model" "set model.uri"
  "--port" "the head serves on 8080, the port KServe's Service targets"
  "--host" "the head listens on every interface of the pod"
  "--distributed-executor-backend" "the group runs on Ray"
  | toJson }}
{{- end }}

{{- /*
All cross-field rules, in one place. Each failure names the value, says what is wrong and what to
do. Single-field rules (types, ranges, enums, typos) are in values.schema.json. Context: root.
*/}}
{{- define "multinode-llm.validate" -}}
{{- $v := .Values }}
{{- $errors := list }}

{{- /* the KServe version decides what KServe admits */}}
{{- $kv := include "multinode-llm.kserveVersion" . }}
{{- if semverCompare "<0.15.0-0" $kv }}
{{- $errors = append $errors (printf "kserve.version=%s: KServe added multi-node serving (workerSpec pipelineParallelSize/tensorParallelSize and its controller) in 0.15.0; upgrade KServe to 0.15 or later and set kserve.version to it" (toString $v.kserve.version)) }}
{{- end }}
{{- if and (eq $v.kserve.deploymentMode "Standard") (semverCompare "<0.16.0-0" $kv) }}
{{- $errors = append $errors (printf "kserve.deploymentMode=Standard: KServe %s knows this mode as RawDeployment (Standard is its name from 0.16); set kserve.deploymentMode=RawDeployment" (toString $v.kserve.version)) }}
{{- end }}
{{- $class := include "multinode-llm.requiredAutoscalerClass" . }}
{{- if and $v.inferenceService.autoscalerClass (ne $v.inferenceService.autoscalerClass $class) }}
{{- $errors = append $errors (printf "inferenceService.autoscalerClass=%s: KServe %s admits a multi-node InferenceService only with autoscaler class %q; leave inferenceService.autoscalerClass empty (the chart sets %q) or set it to %q" $v.inferenceService.autoscalerClass (toString $v.kserve.version) $class $class $class) }}
{{- end }}

{{- /* the model and where it is stored */}}
{{- $uri := $v.model.uri }}
{{- $scheme := include "multinode-llm.modelScheme" . }}
{{- if not $uri }}
{{- $errors = append $errors "model.uri is required: set it to hf://ORG/NAME[:REVISION] (e.g. hf://Qwen/Qwen2.5-0.5B-Instruct), pvc://CLAIM/PATH or oci://REGISTRY/REPO:TAG" }}
{{- else if eq $scheme "hf" }}
{{- if not (regexMatch (include "multinode-llm.hfPattern" .) $uri) }}
{{- $errors = append $errors (printf "model.uri=%s is not a valid Hugging Face URI: use hf://ORG/NAME or hf://ORG/NAME:REVISION (e.g. hf://Qwen/Qwen2.5-0.5B-Instruct); the revision may not contain '/'" $uri) }}
{{- end }}
{{- else if eq $scheme "pvc" }}
{{- if not (regexMatch "^pvc://[a-z0-9]([-a-z0-9.]*[a-z0-9])?(/[^/].*)?$" $uri) }}
{{- $errors = append $errors (printf "model.uri=%s is not a valid PVC URI: use pvc://CLAIM/PATH with the name of an existing ReadWriteMany claim in the release namespace" $uri) }}
{{- end }}
{{- else if eq $scheme "oci" }}
{{- if semverCompare "<0.16.0-0" $kv }}
{{- $errors = append $errors (printf "model.uri=%s: KServe %s admits only pvc:// storage for multi-node (oci:// from 0.16); use hf://ORG/NAME (the chart stages it onto a volume) or pvc://CLAIM/PATH, or upgrade KServe and kserve.version" $uri (toString $v.kserve.version)) }}
{{- end }}
{{- else }}
{{- $errors = append $errors (printf "model.uri=%s: multi-node KServe reads the model from a volume every node shares; use hf://ORG/NAME (the chart stages it onto a ReadWriteMany volume), pvc://CLAIM/PATH%s" $uri (ternary " or oci://REGISTRY/REPO:TAG" "" (semverCompare ">=0.16.0-0" $kv))) }}
{{- end }}
{{- if and $v.model.storage.existingClaim (ne $scheme "hf") }}
{{- $errors = append $errors (printf "model.storage.existingClaim=%s applies to hf:// models only; for a model already on a claim set model.uri=pvc://%s/PATH and leave model.storage.existingClaim empty" $v.model.storage.existingClaim $v.model.storage.existingClaim) }}
{{- end }}
{{- if and (include "multinode-llm.createsClaim" .) (not (has "ReadWriteMany" $v.model.storage.accessModes)) }}
{{- $errors = append $errors (printf "model.storage.accessModes=%s lacks ReadWriteMany: the head and the workers mount the model volume from different nodes; add ReadWriteMany and pick a model.storage.storageClassName that offers it (NFS, CephFS, EFS, Filestore, Azure Files)" (toJson $v.model.storage.accessModes)) }}
{{- end }}
{{- if $v.modelCache.enabled }}
{{- $errors = append $errors "modelCache.enabled=true: the in-cluster model cache is not available in this chart version yet; set modelCache.enabled=false and, to download through a cache you already run, set modelCache.endpoint to its URL" }}
{{- end }}

{{- /* GPUs: a type KServe accepts, counted the way KServe counts */}}
{{- $standard := splitList " " (include "multinode-llm.standardGpuTypes" .) }}
{{- $gpu := $v.gpu.resourceName }}
{{- $custom := $v.gpu.customResourceTypes | default list }}
{{- if and (not (has $gpu $standard)) (not (has $gpu $custom)) }}
{{- $errors = append $errors (printf "gpu.resourceName=%s is not a GPU type KServe knows (%s); add it to gpu.customResourceTypes to declare it, or use one of those" $gpu (join ", " $standard)) }}
{{- else if and (not (has $gpu $standard)) (gt (int $v.parallelism.tensor) 1) }}
{{- $errors = append $errors (printf "gpu.resourceName=%s with parallelism.tensor=%d: KServe counts only %s when it sizes the group, so it would start tensor x pipeline = %d nodes of one GPU each; use parallelism.tensor=1 with a custom GPU type, or a standard type" $gpu (int $v.parallelism.tensor) (join ", " $standard) (mul $v.parallelism.tensor $v.parallelism.pipeline)) }}
{{- end }}
{{- range $role := list "head" "worker" }}
{{- $res := index $v $role "resources" | default dict }}
{{- range $kind := list "requests" "limits" }}
{{- range $name, $_ := index $res $kind | default dict }}
{{- if or (has $name $standard) (eq $name $gpu) }}
{{- $errors = append $errors (printf "%s.resources.%s.%s: the chart sets GPUs from parallelism.tensor and gpu.resourceName; remove it from %s.resources" $role $kind $name $role) }}
{{- else if and (not (has $name (list "cpu" "memory" "ephemeral-storage" "storage"))) (not (has $name $custom)) }}
{{- $errors = append $errors (printf "%s.resources.%s.%s: KServe rejects any extended resource it does not know as an unknown GPU type; list %s in gpu.customResourceTypes" $role $kind $name $name) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{- /* environment and vLLM arguments the chart or KServe own */}}
{{- $reservedEnv := include "multinode-llm.reservedEnv" . | fromJson }}
{{- range $role := list "head" "worker" }}
{{- range $i, $e := index $v $role "env" | default list }}
{{- if hasKey $reservedEnv $e.name }}
{{- $errors = append $errors (printf "%s.env[%d] sets %s: %s; remove it from %s.env" $role $i $e.name (get $reservedEnv $e.name) $role) }}
{{- end }}
{{- end }}
{{- end }}
{{- $reservedFlags := include "multinode-llm.reservedVllmFlags" . | fromJson }}
{{- range $i, $arg := $v.vllm.args }}
{{- range $flag, $instead := $reservedFlags }}
{{- if or (eq $arg $flag) (hasPrefix (printf "%s=" $flag) $arg) }}
{{- $errors = append $errors (printf "vllm.args[%d]=%s: the chart owns %s; %s" $i $arg $flag $instead) }}
{{- end }}
{{- end }}
{{- end }}

{{- /* names KServe derives from the InferenceService name: isvc.<name>-predictor-worker is a label value (63 characters) */}}
{{- $fullname := include "multinode-llm.fullname" . }}
{{- if or (gt (len $fullname) 41) (not (regexMatch "^[a-z]([-a-z0-9]*[a-z0-9])?$" $fullname)) }}
{{- $errors = append $errors (printf "the InferenceService name %q (release name%s) must start with a letter, hold only a-z, 0-9 and '-', and be at most 41 characters (KServe labels pods isvc.<name>-predictor-worker); use a shorter release name or set fullnameOverride" $fullname (ternary " via fullnameOverride" " plus chart name" (not (empty $v.fullnameOverride)))) }}
{{- end }}

{{- /* the head must give up on a missing worker, and say so, before kubelet kills it */}}
{{- $startup := $v.head.probes.startup }}
{{- $budget := add (int ($startup.initialDelaySeconds | default 0)) (mul (int $startup.periodSeconds) (int $startup.failureThreshold)) }}
{{- if ge (int $v.group.waitTimeoutSeconds) (int $budget) }}
{{- $errors = append $errors (printf "group.waitTimeoutSeconds=%d must be shorter than the head's startup budget of %d s (head.probes.startup: initialDelaySeconds + periodSeconds x failureThreshold), so the head can exit naming the missing worker before kubelet kills it; lower group.waitTimeoutSeconds or raise head.probes.startup.failureThreshold" (int $v.group.waitTimeoutSeconds) (int $budget)) }}
{{- end }}

{{- if $errors }}
{{- fail (printf "\n\nmultinode-llm: %d value(s) to fix:\n  - %s\n" (len $errors) (join "\n  - " $errors)) }}
{{- end }}
{{- end }} {{- /* define "multinode-llm.validate" */}}
