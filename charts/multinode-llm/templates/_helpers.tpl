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

{{- /* Labels that stay the same across chart versions. The InferenceService carries only these:
KServe copies its labels into both pod templates (components/predictor.go buildObjectMeta, every
release), so a label that changes with the chart would restart every GPU pod. Context: root. */}}
{{- define "multinode-llm.stableLabels" -}}
{{ include "multinode-llm.selectorLabels" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: multinode-llm
{{- end }}

{{- /* Standard labels of every object but the InferenceService. Context: root. */}}
{{- define "multinode-llm.labels" -}}
helm.sh/chart: {{ include "multinode-llm.chart" . }}
{{ include "multinode-llm.stableLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{- /* An image reference from {repository, tag, digest} values; the tag defaults to appVersion and
a digest pins it. Context: dict "image" <image values> "root" $. */}}
{{- define "multinode-llm.imageRef" -}}
{{- $tag := default .root.Chart.AppVersion .image.tag }}
{{- if .image.digest }}
{{- printf "%s:%s@%s" .image.repository $tag .image.digest }}
{{- else }}
{{- printf "%s:%s" .image.repository $tag }}
{{- end }}
{{- end }}

{{- /* Runtime image reference: image.repository, else the serving image accelerators.yaml lists
for the vendor of gpu.resourceName ("multinode-llm.validate" refuses a vendor with none). Context:
root. */}}
{{- define "multinode-llm.image" -}}
{{- $image := deepCopy .Values.image }}
{{- $_ := set $image "repository" (include "multinode-llm.imageRepository" .) }}
{{- include "multinode-llm.imageRef" (dict "image" $image "root" .) }}
{{- end }}

{{- /* The serving image's repository: image.repository, else the image of the accelerators.yaml
entry that claims gpu.resourceName by its name or domain; empty where there is none (a vendor no
image is built for, or a resource no entry claims: the CUDA image of the default entry would not
drive it). Context: root. */}}
{{- define "multinode-llm.imageRepository" -}}
{{- $accelerator := include "multinode-llm.accelerator" . | fromJson }}
{{- if .Values.image.repository }}
{{- .Values.image.repository }}
{{- else if ne $accelerator.matched "default" }}
{{- $accelerator.image | default "" }}
{{- end }}
{{- end }}

{{- /* KServe's storage initializer image (the ClusterStorageContainer): v + the KServe release
unless modelCache.storageContainer.image.tag is set. Context: root. */}}
{{- define "multinode-llm.storageInitializerImage" -}}
{{- $release := include "multinode-llm.kserveRelease" . | fromJson }}
{{- $image := .Values.modelCache.storageContainer.image }}
{{- printf "%s:%s" $image.repository (default (printf "v%s" $release.version) $image.tag) }}
{{- end }}

{{- /* Name clients send as "model" (--served-model-name). Context: root. */}}
{{- define "multinode-llm.servedModelName" -}}
{{- default .Release.Name .Values.model.name }}
{{- end }}

{{- /* The serving runtime's name: runtime.name, else the full name (a cluster-scoped one carries the
namespace), then the group's spec hash. Every change of the group is a new runtime that the
InferenceService names in the same change. Helm applies the kinds it does not know in alphabetical
order, the InferenceService before a ServingRuntime (kind_sorter.go): a KServe that reconciled
between the two would roll the group with the old runtime, then again with the new one (and the
head Deployment's generation would pass the InferenceService's, which kstatus compares). An
InferenceService that names a runtime not there yet is reconciled once it is (KServe retries on
back-off), with the new runtime only. Context: dict "root" $ "groupSpec" hash (empty while the hash
is computed: the base alone). */}}
{{- define "multinode-llm.runtimeName" -}}
{{- $v := .root.Values }}
{{- $base := $v.runtime.name }}
{{- if not $base }}
{{- $base = include "multinode-llm.fullname" .root }}
{{- if eq $v.runtime.scope "Cluster" }}
{{- $base = printf "%s-%s" $base .root.Release.Namespace }}
{{- end }}
{{- end }}
{{- if .groupSpec }}
{{- printf "%s-%s" ($base | trunc 242 | trimSuffix "-") (.groupSpec | trunc 10) }}
{{- else }}
{{- $base }}
{{- end }}
{{- end }}

{{- /* The Service KServe makes in front of the head pods, port 80 to the head's first container
port (service_reconciler.go createDefaultSvc, v0.15.0 to v0.20.0): what the readiness Job, the test
pod, the Ingress and the HTTPRoute talk to. Context: root. */}}
{{- define "multinode-llm.predictorService" -}}
{{- include "multinode-llm.fullname" . }}-predictor
{{- end }}

{{- /* The predictor Service's URL inside the cluster. Context: root. */}}
{{- define "multinode-llm.predictorUrl" -}}
http://{{ include "multinode-llm.predictorService" . }}.{{ .Release.Namespace }}.svc.{{ .Values.clusterDomain }}
{{- end }}

{{- /* The name of the Ingress and of the HTTPRoute: not <fullname>, the name KServe gives the
Ingress it makes for an InferenceService once PredictorReady is True (kube_ingress_reconciler.go,
createRawIngress, v0.15.0 to v0.20.0; a multi-node group gets there on 0.15 and 0.20): two owners
of one object would overwrite each other. Context: root. */}}
{{- define "multinode-llm.trafficName" -}}
{{- include "multinode-llm.fullname" . }}-api
{{- end }}

{{- /* The label the backend puts on every pod of the group (head and workers): KServe's
InferenceService name, or LeaderWorkerSet's set name. Context: root. */}}
{{- define "multinode-llm.groupLabel" -}}
{{- ternary (include "multinode-llm.lwsNameLabel" .) "serving.kserve.io/inferenceservice" (eq .Values.group.backend "lws") }}
{{- end }}

{{- /* The label that changes with each new spec of the group's pods: KServe's isvc.generation, or
LeaderWorkerSet's template-revision-hash (RevisionKey, lws v0.9.0). Context: root. */}}
{{- define "multinode-llm.generationLabel" -}}
{{- ternary "leaderworkerset.sigs.k8s.io/template-revision-hash" "isvc.generation" (eq .Values.group.backend "lws") }}
{{- end }}

{{- /* Selector of every pod of the group, head and workers. Context: root. */}}
{{- define "multinode-llm.groupSelector" -}}
{{ include "multinode-llm.groupLabel" . }}: {{ include "multinode-llm.fullname" . }}
{{- end }}

{{- /* The KServe release kserve.version names, from kserve-releases.yaml (the chart's table of
releases), as JSON: its entry plus "version" (MAJOR.MINOR.PATCH). MAJOR.MINOR means the newest patch
the table lists; empty means the table's default. An unverified release takes the behaviour of the
release it renders as (its own status and defects kept). {} when the table lacks the version.
Context: root. */}}
{{- define "multinode-llm.kserveRelease" -}}
{{- $table := .Files.Get "kserve-releases.yaml" | fromYaml }}
{{- $asked := trimPrefix "v" (toString (default $table.default .Values.kserve.version)) }}
{{- $found := "" }}
{{- if hasKey $table.releases $asked }}
{{- $found = $asked }}
{{- else }}
{{- range $version, $_ := $table.releases }}
{{- if and (hasPrefix (printf "%s." $asked) $version) (or (not $found) (semverCompare (printf ">%s" $found) $version)) }}
{{- $found = $version }}
{{- end }}
{{- end }}
{{- end }}
{{- if $found }}
{{- $release := deepCopy (get $table.releases $found) }}
{{- with $release.renderAs }}
{{- $release = merge $release (deepCopy (get $table.releases .)) }}
{{- end }}
{{- $_ := set $release "version" $found }}
{{- toJson $release }}
{{- else }}
{{- toJson dict }}
{{- end }}
{{- end }} {{- /* define "multinode-llm.kserveRelease" */}}

{{- /* The versions kserve-releases.yaml lists, for messages. Context: root. */}}
{{- define "multinode-llm.kserveVersions" -}}
{{- $table := .Files.Get "kserve-releases.yaml" | fromYaml }}
{{- keys $table.releases | sortAlpha | join ", " }}
{{- end }}

{{- /* The raw deployment mode's name in the targeted release. Context: root. */}}
{{- define "multinode-llm.deploymentMode" -}}
{{- (include "multinode-llm.kserveRelease" . | fromJson).deploymentMode }}
{{- end }}

{{- /* The autoscaler class the targeted release requires for multi-node. Context: root. */}}
{{- define "multinode-llm.requiredAutoscalerClass" -}}
{{- (include "multinode-llm.kserveRelease" . | fromJson).autoscalerClass }}
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

{{- /* True when the release serves a model (a release may run only the model cache). Context: root. */}}
{{- define "multinode-llm.hasModel" -}}
{{- if .Values.model.uri }}true{{ end }}
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

{{- /* Folder inside the claim for an hf:// model: refs/<revision> and snapshots/<commit> go under
it (runtime/src/multinode_llm/staging/layout.py). Context: root. */}}
{{- define "multinode-llm.modelPath" -}}
{{- if .Values.model.storage.path }}
{{- .Values.model.storage.path }}
{{- else }}
{{- $hf := include "multinode-llm.hfParts" . | fromJson }}
{{- printf "models/%s/%s" $hf.org $hf.name }}
{{- end }}
{{- end }}

{{- /* The revision of an hf:// model (main when none is given). Context: root. */}}
{{- define "multinode-llm.modelRevision" -}}
{{- (include "multinode-llm.hfParts" . | fromJson).revision }}
{{- end }}

{{- /* storageUri of the InferenceService: the staged copy for hf://, model.uri otherwise. Context: root. */}}
{{- define "multinode-llm.storageUri" -}}
{{- if include "multinode-llm.stagesModel" . }}
{{- printf "pvc://%s/%s" (include "multinode-llm.modelClaim" .) (include "multinode-llm.modelPath" .) }}
{{- else }}
{{- .Values.model.uri }}
{{- end }}
{{- end }}

{{- /* Name of the cache's DaemonSet, its node-local Service and its NetworkPolicy. Context: root. */}}
{{- define "multinode-llm.cacheName" -}}
{{- printf "%s-cache" (include "multinode-llm.fullname" .) }}
{{- end }}

{{- /* Labels that select the cache pods. Context: root. */}}
{{- define "multinode-llm.cacheSelectorLabels" -}}
{{ include "multinode-llm.selectorLabels" . }}
app.kubernetes.io/component: model-cache
{{- end }}

{{- /* DNS name of the headless Service whose addresses are the cache pods (the peers). Context: root. */}}
{{- define "multinode-llm.cachePeersHost" -}}
{{- printf "%s-peers.%s.svc.%s" (include "multinode-llm.cacheName" .) .Release.Namespace .Values.clusterDomain }}
{{- end }}

{{- /* HF_ENDPOINT of the cache's clients: the node-local Service, answered by the cache on the
client's own node. Context: root. */}}
{{- define "multinode-llm.cacheEndpoint" -}}
{{- printf "http://%s.%s.svc.%s:8090" (include "multinode-llm.cacheName" .) .Release.Namespace .Values.clusterDomain }}
{{- end }}

{{- /* Name of the ClusterStorageContainer. Context: root. */}}
{{- define "multinode-llm.storageContainerName" -}}
{{- /* cluster-scoped: the namespace keeps two releases of one name apart */}}
{{- default (printf "%s-%s-hf" (include "multinode-llm.fullname" .) .Release.Namespace | trunc 253) .Values.modelCache.storageContainer.name }}
{{- end }}

{{- /* TCP port of modelCache.upstream: the explicit one, else 443 for https and 80 for http. Context: root. */}}
{{- define "multinode-llm.upstreamPort" -}}
{{- $url := urlParse .Values.modelCache.upstream }}
{{- $port := regexFind ":[0-9]+$" $url.host | trimPrefix ":" }}
{{- default (ternary "443" "80" (eq $url.scheme "https")) $port }}
{{- end }}

{{- /* Bytes in a quantity with one of the units values.schema.json admits for the store size
(Ki, Mi, Gi, Ti, k, M, G, T). Context: the quantity string. */}}
{{- define "multinode-llm.quantityBytes" -}}
{{- $units := dict "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 "k" 1e3 "M" 1e6 "G" 1e9 "T" 1e12 "" 1.0 }}
{{- $number := regexFind "^[0-9]+(\\.[0-9]+)?" . }}
{{- $unit := trimPrefix $number . }}
{{- mulf (float64 $number) (get $units $unit) | ceil | int64 }}
{{- end }}

{{- /* The kubelet's size limit of an emptyDir store: the store size plus 5% (at least 1Gi) of
headroom for the filesystem (the cache counts its metadata within the size), so that eviction by
the cache, never by the kubelet, keeps it in bounds. In Mi. Context: root. */}}
{{- define "multinode-llm.cacheStoreSizeLimit" -}}
{{- $bytes := include "multinode-llm.quantityBytes" .Values.modelCache.store.size | float64 }}
{{- $headroom := max (divf $bytes 20 | ceil | int64) 1073741824 }}
{{- printf "%dMi" (divf (addf $bytes $headroom) 1048576 | ceil | int64) }}
{{- end }} {{- /* define "multinode-llm.cacheStoreSizeLimit" */}}

{{- /* The GPU types KServe knows without the gpu-resource-types annotation: KServe's fact, not the
chart's accelerator table (DefaultGPUResourceTypeList, pkg/constants/constants.go, the same at every
tag from v0.15.0 to v0.20.0; GetGPUResourceQtyByType, pkg/utils/utils.go, counts only these). */}}
{{- define "multinode-llm.kserveGpuTypes" -}}
nvidia.com/gpu amd.com/gpu intel.com/gpu habana.ai/gaudi
{{- end }}

{{- /* The accelerators.yaml entry of gpu.resourceName, as JSON with its key as `name` and how it
was found as `matched` (name, domain, default): the entry of that resource name, else the first (by
key) of the same domain, else the table's default. Context: root. */}}
{{- define "multinode-llm.accelerator" -}}
{{- $table := .Files.Get "accelerators.yaml" | fromYaml }}
{{- $resource := .Values.gpu.resourceName }}
{{- $domain := splitList "/" $resource | first }}
{{- $exact := "" }}
{{- $sameDomain := "" }}
{{- range $key, $entry := $table.accelerators }}
{{- if eq $entry.resourceName $resource }}
{{- $exact = $key }}
{{- else if and (not $sameDomain) (eq (splitList "/" $entry.resourceName | first) $domain) }}
{{- $sameDomain = $key }}
{{- end }}
{{- end }}
{{- $key := $exact | default $sameDomain | default $table.default }}
{{- $chosen := deepCopy (index $table.accelerators $key) }}
{{- $_ := set $chosen "name" $key }}
{{- $_ = set $chosen "matched" (ternary "name" (ternary "domain" "default" (ne $sameDomain "")) (ne $exact "")) }}
{{- toJson $chosen }}
{{- end }} {{- /* define "multinode-llm.accelerator" */}}

{{- /* The gpu-resource-types annotation (JSON array), empty without custom types or RDMA devices.
KServe's webhooks admit no other extended resource on a multi-node container (HasUnknownGpuResourceType,
pkg/utils/utils.go, every release), so rdma.resources are listed too, after the GPU types:
addGPUResourceToDeployment sets the GPU count on the first listed type the container asks for, and
its node math counts the standard types only. Context: root. */}}
{{- define "multinode-llm.gpuTypesAnnotation" -}}
{{- $types := .Values.gpu.customResourceTypes | default list }}
{{- if .Values.rdma.enabled }}
{{- $types = concat $types (keys (.Values.rdma.resources | default dict) | sortAlpha) }}
{{- end }}
{{- with $types -}}
serving.kserve.io/gpu-resource-types: {{ toJson . | squote }}
{{- end }}
{{- end }}

{{- /* Resources of a head or worker container: the user's CPU/memory plus exactly
parallelism.tensor GPUs as request and limit, so that every KServe version computes
nodes = parallelism.pipeline. Context: dict "root" $ "role" "head"|"worker". */}}
{{- define "multinode-llm.groupResources" -}}
{{- $root := .root }}
{{- $res := deepCopy (index $root.Values .role "resources" | default dict) }}
{{- /* a string, as KServe's defaulting webhook writes every quantity back: no diff against the live object */}}
{{- $gpus := toString (int $root.Values.parallelism.tensor) }}
{{- $devices := dict $root.Values.gpu.resourceName $gpus }}
{{- if $root.Values.rdma.enabled }}
{{- /* RDMA devices as what they are, beside the GPUs: request and limit alike (extended resources) */}}
{{- range $name, $count := $root.Values.rdma.resources }}
{{- $_ := set $devices $name (toString (int $count)) }}
{{- end }}
{{- end }}
{{- $_ := set $res "requests" (merge (deepCopy $devices) ($res.requests | default dict)) }}
{{- $_ = set $res "limits" (merge (deepCopy $devices) ($res.limits | default dict)) }}
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
{{- if eq .Values.group.executor "mp" }}
{{- /* the workers never see the runtime's spec.annotations (KServe copies workerSpec.annotations
into their pods), so both containers are told the mode here (docs/executors.md) */}}
- name: MULTINODE_LLM_EXECUTOR
  value: mp
- name: MASTER_PORT
  value: {{ .Values.group.masterPort | int | quote }}
{{- else }}
- name: RAY_PORT
  value: {{ .Values.ray.port | int | quote }}
{{- end }}
- name: GROUP_WAIT_TIMEOUT
  value: {{ .Values.group.waitTimeoutSeconds | int | quote }}
- name: CLUSTER_DOMAIN
  value: {{ .Values.clusterDomain | quote }}
{{- /* the accelerator's entry (accelerators.yaml): how the runtime starts Ray and which variables
name the collective library's interface; "multinode-llm.validate" refuses a value whose variable the
entry lacks */}}
{{- $accelerator := include "multinode-llm.accelerator" . | fromJson }}
{{- $collective := $accelerator.collective }}
{{- if ne .Values.group.executor "mp" }}
{{- /* Ray's name for the GPUs; an mp group runs no Ray */}}
- name: MULTINODE_LLM_RAY_RESOURCE
  value: {{ $accelerator.rayResource | quote }}
{{- end }}
- name: MULTINODE_LLM_SOCKET_IFNAME_ENV
  value: {{ join "," $collective.socketIfname | quote }}
{{- with .Values.communication.socketIfname }}
{{- $ifname := . }}
{{- range $collective.socketIfname }}
- name: {{ . }}
  value: {{ $ifname | quote }}
{{- end }}
- name: GLOO_SOCKET_IFNAME
  value: {{ . | quote }}
{{- end }}
{{- with .Values.communication.ncclDebug }}
- name: {{ $collective.debug }}
  value: {{ . | quote }}
{{- end }}
{{- if .Values.communication.ncclIbDisable }}
- name: {{ $collective.ibDisable }}
  value: "1"
{{- end }}
{{- if .Values.rdma.enabled }}
# RDMA devices are requested: NCCL's IB transport on, never a silent fall-back to TCP sockets.
- name: {{ $collective.ibDisable }}
  value: "0"
{{- with .Values.rdma.hca }}
- name: {{ $collective.ibHca }}
  value: {{ . | quote }}
{{- end }}
{{- end }}
# The root filesystem is read-only: caches (vLLM, Triton, torch, Hugging Face) go under HOME on /tmp.
- name: HOME
  value: /tmp
{{- include "multinode-llm.compileCacheEnv" . }}
- name: VLLM_NO_USAGE_STATS
  value: "1"
{{- if ne .Values.group.executor "mp" }}
- name: RAY_USAGE_STATS_ENABLED
  value: "0"
{{- end }}
{{- end }} {{- /* define "multinode-llm.groupEnv" */}}

{{- /* Text that reaches the head container through KServe's Go template unchanged: KServe runs
text/template over the merged head container's JSON (ReplacePlaceholders,
controller/v1beta1/inferenceservice/utils/utils.go, every release), so a "{{" (a Jinja chat template,
say) would be evaluated or fail the reconcile. Each "{{" becomes the template action {{`{{`}}, which
prints "{{". Context: the string. */}}
{{- define "multinode-llm.kserveTemplateText" -}}
{{- replace "{{" "{{`{{`}}" (toString .) }}
{{- end }}

{{- /* Variables the worker needs and the targeted release does not inject (kserve-releases.yaml
controller.env.worker): 0.15.0 sets neither REQUEST_GPU_COUNT nor TENSOR_PARALLEL_SIZE there, and the
runtime derives the GPU count from the tensor parallel size. KServe checks these names only in the
head's env. Context: root. */}}
{{- define "multinode-llm.workerEnvGaps" -}}
{{- $injected := (include "multinode-llm.kserveRelease" . | fromJson).controller.env.worker | default list }}
{{- if not (or (has "REQUEST_GPU_COUNT" $injected) (has "TENSOR_PARALLEL_SIZE" $injected)) }}
- name: TENSOR_PARALLEL_SIZE
  value: {{ .Values.parallelism.tensor | int | quote }}
{{- end }}
{{- if not (or (has "RAY_NODE_COUNT" $injected) (has "PIPELINE_PARALLEL_SIZE" $injected)) }}
- name: PIPELINE_PARALLEL_SIZE
  value: {{ .Values.parallelism.pipeline | int | quote }}
{{- end }}
{{- end }} {{- /* define "multinode-llm.workerEnvGaps" */}}

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

{{- /* Mounts of head and worker containers: the chart's, then extraVolumeMounts. The shared compile
cache is a subPath of the model's claim: kubelet creates the folder when it is missing. Context: root. */}}
{{- define "multinode-llm.groupVolumeMounts" -}}
- name: shm
  mountPath: /dev/shm
- name: scratch
  mountPath: /tmp
{{- if .Values.compileCache.enabled }}
{{- $dirs := include "multinode-llm.compileCacheDirs" . | fromJson }}
- name: compile-cache
  mountPath: {{ $dirs.local }}
{{- if .Values.compileCache.shared.enabled }}
- name: compile-cache-shared
  mountPath: {{ $dirs.shared }}
  subPath: {{ .Values.compileCache.shared.path | quote }}
{{- end }}
{{- end }}
{{- with .Values.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- /* Volumes of head and worker pods: /dev/shm in memory, sized by shm.sizeLimit; a writable /tmp;
the compile caches (compileCache). Context: root. */}}
{{- define "multinode-llm.groupVolumes" -}}
- name: shm
  emptyDir:
    medium: Memory
    sizeLimit: {{ .Values.shm.sizeLimit }}
- name: scratch
  emptyDir:
    sizeLimit: {{ .Values.scratch.sizeLimit }}
{{- if .Values.compileCache.enabled }}
- name: compile-cache
  emptyDir:
    sizeLimit: {{ .Values.compileCache.sizeLimit }}
{{- if .Values.compileCache.shared.enabled }}
- name: compile-cache-shared
  persistentVolumeClaim:
    claimName: {{ include "multinode-llm.modelClaimOfUri" . }}
{{- end }}
{{- end }}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- /* Names and mount paths of head and worker pods that the chart or KServe own, each with who
owns it: extraVolumes and extraVolumeMounts may not reuse them. KServe mounts the model claim as
kserve-pvc-source at /mnt/models (storage_initializer_injector.go, every release). */}}
{{- define "multinode-llm.reservedVolumes" -}}
{{- $names := dict "shm" "the chart's /dev/shm (shm.sizeLimit)" "scratch" "the chart's writable /tmp (scratch.sizeLimit)" "compile-cache" "the chart's compile cache (compileCache)" "compile-cache-shared" "the chart's shared compile cache (compileCache.shared)" "kserve-pvc-source" "KServe's model volume" }}
{{- $paths := dict "/dev/shm" "the chart's shm volume (shm.sizeLimit)" "/tmp" "the chart's scratch volume (scratch.sizeLimit)" "/var/cache/multinode-llm/compile" "the chart's compile cache (compileCache)" "/var/cache/multinode-llm/shared" "the chart's shared compile cache (compileCache.shared)" "/mnt/models" "KServe's model mount" }}
{{- if eq .Values.group.backend "lws" }}
{{- $_ := set $names "model" "the chart's model volume (group.backend=lws)" }}
{{- $_ = set $paths "/mnt/models" "the chart's model mount (group.backend=lws)" }}
{{- end }}
{{- dict "names" $names "paths" $paths | toJson }}
{{- end }}

{{- /* Container security context of head and worker: securityContext, plus IPC_LOCK with
rdma.ipcLock (NCCL registers memory for RDMA). Context: root. */}}
{{- define "multinode-llm.groupSecurityContext" -}}
{{- $context := deepCopy .Values.securityContext }}
{{- if and .Values.rdma.enabled .Values.rdma.ipcLock }}
{{- $caps := $context.capabilities | default dict }}
{{- $_ := set $caps "add" (append ($caps.add | default list) "IPC_LOCK" | uniq) }}
{{- $_ = set $context "capabilities" $caps }}
{{- end }}
{{- toYaml $context }}
{{- end }}

{{- /* Labels and annotations of head and worker pods (podLabels, podAnnotations, the Multus
annotation of secondaryNetworks), as JSON {"labels", "annotations"}. Context: root. */}}
{{- define "multinode-llm.podMetadata" -}}
{{- $annotations := deepCopy (.Values.podAnnotations | default dict) }}
{{- with .Values.secondaryNetworks }}
{{- $_ := set $annotations "k8s.v1.cni.cncf.io/networks" (join "," .) }}
{{- end }}
{{- dict "labels" (.Values.podLabels | default dict) "annotations" $annotations | toJson }}
{{- end }}

{{- /* The download Job's name: a Job's pod template cannot change, so the name carries a hash of
its spec. Context: root. */}}
{{- define "multinode-llm.downloadJobName" -}}
{{- printf "%s-download-%s" (include "multinode-llm.fullname" .) (include "multinode-llm.downloadJobSpec" . | sha256sum | trunc 8) }}
{{- end }}

{{- /* The download Job's spec. Context: root. */}}
{{- define "multinode-llm.downloadJobSpec" -}}
backoffLimit: {{ .Values.download.backoffLimit }}
activeDeadlineSeconds: {{ .Values.download.activeDeadlineSeconds }}
template:
  metadata:
    labels:
      {{- include "multinode-llm.selectorLabels" . | nindent 6 }}
      app.kubernetes.io/component: model-download
  spec:
    restartPolicy: Never
    automountServiceAccountToken: false
    securityContext:
      {{- toYaml .Values.podSecurityContext | nindent 6 }}
    {{- with .Values.imagePullSecrets }}
    imagePullSecrets:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    containers:
      - name: stage
        image: {{ include "multinode-llm.imageRef" (dict "image" .Values.download.image "root" .) }}
        imagePullPolicy: {{ .Values.download.image.pullPolicy }}
        command: ["multinode-llm"]
        args:
          - stage
          - {{ .Values.model.uri | quote }}
          - --into
          - {{ printf "/mnt/models/%s" (include "multinode-llm.modelPath" .) | quote }}
        env:
          - name: HOME
            value: /tmp
          - name: HF_HOME
            value: /tmp/huggingface
          {{- if .Values.model.hfTokenSecret.name }}
          # The token is read from a file (never an env value that `kubectl describe` shows).
          - name: HF_TOKEN_PATH
            value: /var/run/secrets/huggingface/token
          {{- end }}
          {{- with .Values.modelCache.endpoint }}
          # Download through the Hub cache; it serves plain HTTP blobs, not Xet. This chart's cache
          # answers through a node-local Service: it must run on the node this pod lands on.
          - name: HF_ENDPOINT
            value: {{ . | quote }}
          - name: HF_HUB_DISABLE_XET
            value: "1"
          {{- end }}
        resources:
          {{- toYaml .Values.download.resources | nindent 10 }}
        securityContext:
          {{- toYaml .Values.securityContext | nindent 10 }}
        volumeMounts:
          - name: model
            mountPath: /mnt/models
          - name: scratch
            mountPath: /tmp
          {{- if .Values.model.hfTokenSecret.name }}
          - name: hf-token
            mountPath: /var/run/secrets/huggingface
            readOnly: true
          {{- end }}
    volumes:
      - name: model
        persistentVolumeClaim:
          claimName: {{ include "multinode-llm.modelClaim" . }}
      - name: scratch
        emptyDir: {}
      {{- with .Values.model.hfTokenSecret.name }}
      - name: hf-token
        secret:
          secretName: {{ . }}
          defaultMode: 288  # 0440: readable by the owner and the pod's fsGroup only
          items:
            - key: {{ $.Values.model.hfTokenSecret.key }}
              path: token
      {{- end }}
{{- end }} {{- /* define "multinode-llm.downloadJobSpec" */}}

{{- /* The InferenceService's own annotations; inferenceService.annotations may not repeat a key
("multinode-llm.ownedKeys"). Context: root. */}}
{{- define "multinode-llm.isvcAnnotations" -}}
serving.kserve.io/deploymentMode: {{ include "multinode-llm.deploymentMode" . }}
serving.kserve.io/autoscalerClass: {{ include "multinode-llm.requiredAutoscalerClass" . }}
{{- with include "multinode-llm.gpuTypesAnnotation" . }}
{{ . }}
{{- end }}
# Argo CD: after the runtime, the volume and the model's download (wave -1).
argocd.argoproj.io/sync-wave: "0"
# KServe copies these into both pods, where its pod webhook reads them before its cluster-wide
# metricsAggregator settings (metrics_aggregate_injector.go, every release): with scraping on there,
# it would annotate the pods prometheus.io/port "9091", queue-proxy's port, which no pod of a raw
# group runs. The group's metrics are on its status and http ports (monitoring.*).
serving.kserve.io/enable-prometheus-scraping: "false"
serving.kserve.io/enable-metric-aggregation: "false"
{{- end }}

{{- /* The serving runtime's own annotations; runtime.annotations may not repeat a key. Context: root. */}}
{{- define "multinode-llm.runtimeAnnotations" -}}
# Argo CD: the runtime exists before the InferenceService that names it.
argocd.argoproj.io/sync-wave: "-1"
# The KServe release the chart rendered for (kserve-releases.yaml); KServe copies runtime
# metadata into no pod.
multinode-llm/kserve-release: {{ (include "multinode-llm.kserveRelease" . | fromJson).version | quote }}
{{- end }}

{{- /* Who decides each label and annotation the chart sets, and what to do instead of repeating
it in a user map: a map holding a key the chart writes too renders a duplicate key, and the API
server keeps the last one (the user's), silently. Context: root. */}}
{{- define "multinode-llm.keyOwners" -}}
{{- $release := include "multinode-llm.kserveRelease" . | fromJson }}
{{- dict
  "serving.kserve.io/deploymentMode" (printf "kserve.version decides it (%s for KServe %s, the only mode a multi-node group runs in); set kserve.version to the release the cluster runs" $release.deploymentMode $release.version)
  "serving.kserve.io/autoscalerClass" (printf "inferenceService.autoscalerClass decides it (KServe %s admits a multi-node InferenceService only with %q); set inferenceService.autoscalerClass, or leave both empty" $release.version $release.autoscalerClass)
  "serving.kserve.io/gpu-resource-types" "gpu.customResourceTypes and rdma.resources decide it; list the types there"
  "argocd.argoproj.io/sync-wave" "the chart orders its objects for Argo CD (the volume, the download and the runtime -1, the InferenceService 0, the readiness Job 1); remove it"
  "multinode-llm/kserve-release" "kserve.version decides it (the local emulation and the notes read it); set kserve.version"
  "serving.kserve.io/enable-prometheus-scraping" "the chart turns KServe's scraping annotations off: they would point Prometheus at queue-proxy's port 9091, where no pod of the group listens; scrape with monitoring.podMonitor or monitoring.serviceMonitor"
  "serving.kserve.io/enable-metric-aggregation" "the chart turns KServe's metric aggregation off: it aggregates through queue-proxy, which a raw group does not run; scrape with monitoring.podMonitor or monitoring.serviceMonitor"
  "helm.sh/chart" "the chart's name and version decide it; remove it"
  "app.kubernetes.io/name" "nameOverride decides it (the chart's selectors use it); set nameOverride"
  "app.kubernetes.io/instance" "the release name decides it (the chart's selectors use it); remove it"
  "app.kubernetes.io/managed-by" "Helm decides it; remove it"
  "app.kubernetes.io/part-of" "the chart decides it (multinode-llm); remove it"
  "app.kubernetes.io/version" "the chart's appVersion decides it; remove it"
  "app.kubernetes.io/component" "the chart names the part of the release an object is (the monitors and dashboards select by it); remove it"
  "severity" "each alert's severity decides it (critical or warning, docs/monitoring.md); route on another label"
  | toJson }}
{{- end }} {{- /* define "multinode-llm.keyOwners" */}}

{{- /* The keys of each user map that the chart writes into the same map, by the map's value path,
as JSON {"inferenceService.labels": ["app.kubernetes.io/name", ...], ...}. Read from the very
helpers that render them. Context: root. */}}
{{- define "multinode-llm.ownedKeys" -}}
{{- $labels := include "multinode-llm.labels" . | fromYaml }}
{{- $monitoring := merge (deepCopy $labels) (dict "app.kubernetes.io/component" "monitoring") }}
{{- dict
  "inferenceService.labels" (keys (include "multinode-llm.stableLabels" . | fromYaml))
  "inferenceService.annotations" (keys (include "multinode-llm.isvcAnnotations" . | fromYaml))
  "runtime.labels" (keys $labels)
  "runtime.annotations" (keys (include "multinode-llm.runtimeAnnotations" . | fromYaml))
  "monitoring.labels" (keys $monitoring)
  "monitoring.dashboard.sidecarLabels" (keys $monitoring)
  "monitoring.rules.alertLabels" (list "severity")
  | toJson }}
{{- end }} {{- /* define "multinode-llm.ownedKeys" */}}

{{- /* User labels and annotations that repeat a key the chart sets, as a JSON array of messages
naming the key, what decides it and the fix. Context: root. */}}
{{- define "multinode-llm.validateOwnedKeys" -}}
{{- $errors := list }}
{{- $owners := include "multinode-llm.keyOwners" . | fromJson }}
{{- $owned := include "multinode-llm.ownedKeys" . | fromJson }}
{{- range $path := keys $owned | sortAlpha }}
{{- $map := $.Values }}
{{- range splitList "." $path }}
{{- $map = index $map . | default dict }}
{{- end }}
{{- $kind := ternary "annotation" "label" (hasSuffix "annotations" $path) }}
{{- range $key := get $owned $path | sortAlpha }}
{{- if hasKey $map $key }}
{{- $errors = append $errors (printf "%s.%s=%s: the chart sets this %s, and a duplicate key's last copy (this one) is the one the API server keeps; %s" $path $key (toString (get $map $key)) $kind (get $owners $key | default (printf "the chart decides it; remove it from %s" $path))) }}
{{- end }}
{{- end }}
{{- end }}
{{- toJson $errors }}
{{- end }} {{- /* define "multinode-llm.validateOwnedKeys" */}}

{{- /* Environment names users may not set in head.env / worker.env, each with what to set instead. */}}
{{- define "multinode-llm.reservedEnv" -}}
{{- dict
  "PIPELINE_PARALLEL_SIZE" "set parallelism.pipeline instead (KServe injects it and rejects it in env)"
  "TENSOR_PARALLEL_SIZE" "set parallelism.tensor instead (KServe injects it and rejects it in env)"
  "RAY_NODE_COUNT" "KServe computes it from parallelism.pipeline"
  "REQUEST_GPU_COUNT" "KServe computes it from parallelism.tensor"
  "MODEL_NAME" "KServe sets it to the InferenceService name; set model.name for the served name"
  "MODEL_DIR" "KServe sets it from model.uri"
  "MODEL_REVISION" "the chart sets it from model.uri's revision"
  "HEAD_SVC" "KServe sets it"
  "WORKER_SVC" "KServe sets it"
  "ISVC_NAME" "KServe sets it"
  "POD_IP" "the chart sets it from the downward API"
  "POD_NAME" "the chart sets it from the downward API"
  "POD_NAMESPACE" "the chart sets it from the downward API"
  "RAY_PORT" "set ray.port instead"
  "MULTINODE_LLM_EXECUTOR" "set group.executor instead"
  "MASTER_PORT" "set group.masterPort instead (group.executor=mp)"
  "GROUP_WAIT_TIMEOUT" "set group.waitTimeoutSeconds instead"
  "CLUSTER_DOMAIN" "set clusterDomain instead"
  "GLOO_SOCKET_IFNAME" "set communication.socketIfname instead"
  "MULTINODE_LLM_RAY_RESOURCE" "the chart sets it from gpu.resourceName (accelerators.yaml)"
  "MULTINODE_LLM_SOCKET_IFNAME_ENV" "the chart sets it from gpu.resourceName (accelerators.yaml)"
  "HOME" "the chart points it at the writable /tmp"
  "MULTINODE_LLM_COMPILE_CACHE" "set compileCache.enabled instead"
  "MULTINODE_LLM_COMPILE_CACHE_LIMIT" "set compileCache.sizeLimit instead"
  "MULTINODE_LLM_COMPILE_CACHE_KEY" "the chart computes it from the model, the parallel sizes, the executor, vllm.args and the image"
  "MULTINODE_LLM_COMPILE_CACHE_SHARED" "set compileCache.shared.enabled instead"
  "MULTINODE_LLM_COMPILE_CACHE_SHARED_LIMIT" "set compileCache.shared.sizeLimit instead"
  "MULTINODE_LLM_GROUP_SPEC" "the chart computes it (the hash of the group's spec the readiness Job waits for)"
  "VLLM_NO_USAGE_STATS" "the chart turns vLLM's usage reports off (the pods call no one outside the cluster)"
  "RAY_USAGE_STATS_ENABLED" "the chart turns Ray's usage reports off (the pods call no one outside the cluster)"
  "PYTHONPATH" "KServe refuses it for security reasons"
  | toJson }}
{{- end }}

{{- /* reservedEnv plus the collective library's variables the chart sets for the accelerator of
gpu.resourceName (accelerators.yaml), as JSON. Context: root. */}}
{{- define "multinode-llm.reservedGroupEnv" -}}
{{- $reserved := include "multinode-llm.reservedEnv" . | fromJson }}
{{- $collective := (include "multinode-llm.accelerator" . | fromJson).collective }}
{{- range $collective.socketIfname }}
{{- $_ := set $reserved . "set communication.socketIfname instead" }}
{{- end }}
{{- with $collective.debug }}
{{- $_ := set $reserved . "set communication.ncclDebug instead" }}
{{- end }}
{{- with $collective.ibDisable }}
{{- $_ := set $reserved . "set communication.ncclIbDisable (TCP sockets) or rdma.enabled (RDMA) instead" }}
{{- end }}
{{- with $collective.ibHca }}
{{- $_ := set $reserved . "set rdma.hca instead" }}
{{- end }}
{{- toJson $reserved }}
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
  "--distributed-executor-backend" "set group.executor (ray or mp)"
  "--nnodes" "the runtime sets it to parallelism.pipeline (group.executor=mp)"
  "-n" "the runtime sets --nnodes to parallelism.pipeline (group.executor=mp)"
  "--node-rank" "the head hands each worker its rank (group.executor=mp)"
  "-r" "the head hands each worker its rank, --node-rank (group.executor=mp)"
  "--master-addr" "the runtime sets it to the head's pod IP (group.executor=mp)"
  "--master-port" "set group.masterPort"
  "--headless" "the runtime runs the workers headless (group.executor=mp)"
  | toJson }}
{{- end }}

{{- /* vLLM flags outside the chart's sizing, each with what it would break: the group is
parallelism.tensor GPUs on each of parallelism.pipeline nodes, and KServe starts exactly those pods
(one head, pipeline - 1 workers), so a flag that asks vLLM for more ranks or lays the model out
across ranks the chart does not plan for cannot work, or works on GPUs the chart never asked for.
Refused until the chart sizes them. (vLLM 0.32's ParallelConfig: world size = pipeline x tensor x
prefill context parallel, times data parallel across engines.) */}}
{{- define "multinode-llm.unsizedVllmFlags" -}}
{{- $dp := "data parallelism runs whole copies of the tensor x pipeline group side by side (their GPUs multiply), while KServe starts one group of parallelism.pipeline pods with parallelism.tensor GPUs each: the engine would wait for ranks no pod holds; remove it, and serve more copies of the model as more releases (one group each)" }}
{{- $ep := "expert parallelism shards a MoE model's experts over data-parallel and tensor ranks, a layout the chart's sizing (tensor within a node, pipeline across nodes) does not plan or request GPUs for; remove it (the chart does not size expert parallelism yet)" }}
{{- $pcp := "prefill context parallelism multiplies the ranks of the group (tensor x pipeline x prefill context parallel), and KServe gives the group only parallelism.tensor x parallelism.pipeline GPUs; remove it (the chart does not size it yet)" }}
{{- dict
  "--data-parallel-size" $dp "-dp" $dp
  "--data-parallel-size-local" $dp "-dpl" $dp
  "--data-parallel-rank" $dp "-dpn" $dp
  "--data-parallel-start-rank" $dp "-dpr" $dp
  "--data-parallel-address" $dp "-dpa" $dp
  "--data-parallel-rpc-port" $dp "-dpp" $dp
  "--data-parallel-backend" $dp "-dpb" $dp
  "--data-parallel-hybrid-lb" $dp "-dph" $dp
  "--data-parallel-external-lb" $dp "-dpe" $dp
  "--data-parallel-multi-port-external-lb" $dp "-dpm" $dp
  "--enable-expert-parallel" $ep "-ep" $ep
  "--enable-eplb" (printf "expert load balancing needs expert parallelism: %s" $ep)
  "--enable-elastic-ep" (printf "elastic expert parallelism grows and shrinks data-parallel ranks: %s" $ep)
  "--elastic-ep-max-dp-size" (printf "elastic expert parallelism grows and shrinks data-parallel ranks: %s" $ep)
  "--prefill-context-parallel-size" $pcp "-pcp" $pcp
  | toJson }}
{{- end }} {{- /* define "multinode-llm.unsizedVllmFlags" */}}

{{- /* The refusals of vllm.args, as a JSON array of messages: flags the chart or the runtime own
("multinode-llm.reservedVllmFlags") and flags outside the chart's sizing. vLLM's parser reads
--master_port as --master-port, and a unique prefix of a flag as the flag (argparse's
abbreviations: --enable-expert is --enable-expert-parallel), so both are matched. Context: root. */}}
{{- define "multinode-llm.validateVllmArgs" -}}
{{- $errors := list }}
{{- $owned := include "multinode-llm.reservedVllmFlags" . | fromJson }}
{{- $unsized := include "multinode-llm.unsizedVllmFlags" . | fromJson }}
{{- range $i, $arg := .Values.vllm.args }}
{{- $name := first (splitList "=" (toString $arg)) }}
{{- $long := and (hasPrefix "--" $name) (gt (len $name) 2) }}
{{- if $long }}
{{- $name = replace "_" "-" $name }}
{{- end }}
{{- /* the flag vLLM reads: this one, else the one it abbreviates */}}
{{- $flag := "" }}
{{- $all := merge (deepCopy $owned) $unsized }}
{{- if hasKey $all $name }}
{{- $flag = $name }}
{{- else if $long }}
{{- range $candidate := keys $all | sortAlpha }}
{{- if and (not $flag) (hasPrefix $name $candidate) }}
{{- $flag = $candidate }}
{{- end }}
{{- end }}
{{- end }}
{{- if and (not $flag) (hasPrefix "--data-parallel-" $name) }}
{{- $flag = "--data-parallel-size" }}
{{- end }}
{{- $read := ternary "" (printf " (vLLM reads it as %s)" $flag) (or (eq $name $flag) (hasPrefix "--data-parallel-" $name)) }}
{{- if hasKey $owned $flag }}
{{- $errors = append $errors (printf "vllm.args[%d]=%s%s: the chart owns %s; %s" $i $arg $read $flag (get $owned $flag)) }}
{{- else if $flag }}
{{- $errors = append $errors (printf "vllm.args[%d]=%s%s is outside the chart's sizing: %s" $i $arg $read (get $unsized $flag)) }}
{{- end }}
{{- end }}
{{- toJson $errors }}
{{- end }} {{- /* define "multinode-llm.validateVllmArgs" */}}

{{- /* The KServe releases of kserve-releases.yaml whose controller has the multi-node executor
backend EXECUTOR (controller.executors), oldest first, as a JSON array; only those the chart
supports (status supported) with "supported" true. Context: dict "root" $ "executor" "mp"
"supported" bool. */}}
{{- define "multinode-llm.executorReleases" -}}
{{- $table := .root.Files.Get "kserve-releases.yaml" | fromYaml }}
{{- $found := list }}
{{- range $version, $release := $table.releases }}
{{- if and $release.controller (has $.executor $release.controller.executors) (or (not $.supported) (eq $release.status "supported")) }}
{{- $found = append $found $version }}
{{- end }}
{{- end }}
{{- /* sortAlpha orders 0.15.0 .. 0.21.0 correctly while every minor has two digits */}}
{{- $found | sortAlpha | toJson }}
{{- end }}

{{- /* The refusals of values that an mp group (group.executor=mp) cannot use or that clash with its
master port, as a JSON array of messages; "multinode-llm.validate" reports them with the others.
Context: root. */}}
{{- define "multinode-llm.validateExecutor" -}}
{{- $v := .Values }}
{{- $errors := list }}
{{- $release := include "multinode-llm.kserveRelease" . | fromJson }}
{{- if eq $v.group.executor "mp" }}
{{- $since := include "multinode-llm.executorReleases" (dict "root" . "executor" "mp" "supported" false) | fromJsonArray | first }}
{{- $supported := include "multinode-llm.executorReleases" (dict "root" . "executor" "mp" "supported" true) | fromJsonArray }}
{{- if and (eq $v.group.backend "kserve") $release (not (has "mp" ($release.controller.executors | default list))) }}
{{- $errors = append $errors (printf "group.executor=mp needs KServe's Ray-less multi-node mode, which KServe %s lacks: its controller ignores the runtime's multinode/executor-backend annotation and sizes the group for Ray (KServe added the mode in %s, computeMpNodeAndGPUs in components/predictor.go); upgrade KServe to a release the chart supports with it (%s) and set kserve.version to it, or use group.executor=ray" $release.version $since (join ", " $supported)) }}
{{- end }}
{{- if ne (int $v.ray.port) 6379 }}
{{- $errors = append $errors (printf "ray.port=%d applies to group.executor=ray only: an mp group runs no Ray; leave ray.port at 6379, or use group.executor=ray" (int $v.ray.port)) }}
{{- end }}
{{- range $role := list "head" "worker" }}
{{- range $i, $e := index $v $role "env" | default list }}
{{- if hasPrefix "RAY_" (toString $e.name) }}
{{- $errors = append $errors (printf "%s.env[%d] sets %s, a Ray setting: an mp group (group.executor=mp) runs no Ray; remove it from %s.env, or use group.executor=ray" $role $i $e.name $role) }}
{{- end }}
{{- end }}
{{- end }}
{{- range $i, $arg := $v.vllm.args }}
{{- if hasPrefix "--ray-" (replace "_" "-" (toString $arg)) }}
{{- $errors = append $errors (printf "vllm.args[%d]=%s is a Ray option of vLLM: an mp group (group.executor=mp) runs no Ray; remove it, or use group.executor=ray" $i $arg) }}
{{- end }}
{{- end }}
{{- $taken := dict "8080" "vLLM's OpenAI port on the head" "8081" "the supervisor's status port" }}
{{- $master := toString (int $v.group.masterPort) }}
{{- if hasKey $taken $master }}
{{- $errors = append $errors (printf "group.masterPort=%s is %s; pick another port (default 29500)" $master (get $taken $master)) }}
{{- end }}
{{- else if ne (int $v.group.masterPort) 29500 }}
{{- $errors = append $errors (printf "group.masterPort=%d applies to group.executor=mp only: a Ray group forms through Ray's GCS (ray.port); leave group.masterPort at 29500, or set group.executor=mp" (int $v.group.masterPort)) }}
{{- end }}
{{- toJson $errors }}
{{- end }} {{- /* define "multinode-llm.validateExecutor" */}}

{{- /*
Every rule the chart checks at render time, in one place: the limits values.schema.json sets on
single values (ranges, enums, patterns: "x-limits") and the cross-field rules. Each failure names the
value, says what is wrong, why, and what to do. Types, keys and typos stay Helm's schema check,
which runs before any template. Context: root.
*/}}
{{- define "multinode-llm.validate" -}}
{{- $v := .Values }}
{{- $errors := list }}

{{- /* the schema's limits on single values first (values.schema.json "x-limits", as
files/limits.json holds them: Helm keeps the schema out of .Files; Helm checked the types and keys
before rendering) */}}
{{- $schema := .Files.Get "files/limits.json" | fromJson }}
{{- $errors = concat $errors (include "multinode-llm.limitRefusals" (dict "value" .Values "schema" $schema "path" "" "why" "" "definitions" $schema.definitions) | fromJsonArray) }}

{{- /* the KServe release decides what KServe admits and does (kserve-releases.yaml) */}}
{{- $release := include "multinode-llm.kserveRelease" . | fromJson }}
{{- $kserve := eq $v.group.backend "kserve" }}
{{- if $kserve }}
{{- $asked := toString (default "" $v.kserve.version) }}
{{- if not $release }}
{{- if and (regexMatch "^v?0\\.([0-9]|1[0-4])(\\.|$)" $asked) }}
{{- $errors = append $errors (printf "kserve.version=%s: KServe added multi-node serving (workerSpec pipelineParallelSize/tensorParallelSize and its controller) in 0.15.0; upgrade KServe to 0.15 or later and set kserve.version to it" $asked) }}
{{- else }}
{{- $errors = append $errors (printf "kserve.version=%s is not a KServe release this chart knows (%s, in kserve-releases.yaml); set kserve.version to the release installed in the cluster, or leave it empty for %s" $asked (include "multinode-llm.kserveVersions" .) ((.Files.Get "kserve-releases.yaml" | fromYaml).default)) }}
{{- end }}
{{- else if and (eq $release.status "broken") (include "multinode-llm.hasModel" .) }}
{{- $errors = append $errors (printf "kserve.version=%s: KServe %s cannot run this chart's group: %s %s" $asked $release.version (first $release.defects).summary (first $release.defects).chart) }}
{{- else if and (eq $release.status "unverified") (not $v.kserve.allowUnverifiedRelease) (include "multinode-llm.hasModel" .) }}
{{- $errors = append $errors (printf "kserve.version=%s: %s If you accept that, set kserve.allowUnverifiedRelease=true (the chart renders as for KServe %s); otherwise use a verified release (%s)" $asked (first $release.defects).summary $release.renderAs ((.Files.Get "kserve-releases.yaml" | fromYaml).default)) }}
{{- end }}
{{- if and $release $v.kserve.deploymentMode (ne $v.kserve.deploymentMode $release.deploymentMode) }}
{{- $errors = append $errors (printf "kserve.deploymentMode=%s: KServe %s wants %s for this InferenceService (%s); leave kserve.deploymentMode empty, the chart writes the name the release wants" $v.kserve.deploymentMode $release.version $release.deploymentMode (ternary "its validator treats only Standard as the raw mode and refuses RawDeployment with a deploymentStrategy" (ternary "its defaulter rewrites RawDeployment to Standard on the live object, a permanent diff for Argo CD" "Standard is its raw mode's name from 0.16" (eq $release.deploymentMode "Standard")) (eq $release.version "0.16.0"))) }}
{{- end }}
{{- $class := $release.autoscalerClass }}
{{- if and $release $v.inferenceService.autoscalerClass (ne $v.inferenceService.autoscalerClass $class) }}
{{- $errors = append $errors (printf "inferenceService.autoscalerClass=%s: KServe %s admits a multi-node InferenceService only with autoscaler class %q; leave inferenceService.autoscalerClass empty (the chart sets %q) or set it to %q" $v.inferenceService.autoscalerClass $release.version $class $class $class) }}
{{- end }}
{{- end }}

{{- /* the model and where it is stored */}}
{{- $uri := $v.model.uri }}
{{- $scheme := include "multinode-llm.modelScheme" . }}
{{- if not $uri }}
{{- if not (or $v.modelCache.enabled $v.llmInferenceServicePresets.enabled) }}
{{- $errors = append $errors "model.uri is required: set it to hf://ORG/NAME[:REVISION] (e.g. hf://Qwen/Qwen2.5-0.5B-Instruct), pvc://CLAIM/PATH or oci://REGISTRY/REPO:TAG (only a release that runs the model cache, modelCache.enabled=true, or ships only KServe's LLMInferenceService presets, llmInferenceServicePresets.enabled=true, may leave it empty)" }}
{{- end }}
{{- else if eq $scheme "hf" }}
{{- if not (regexMatch (include "multinode-llm.hfPattern" .) $uri) }}
{{- $errors = append $errors (printf "model.uri=%s is not a valid Hugging Face URI: use hf://ORG/NAME or hf://ORG/NAME:REVISION (e.g. hf://Qwen/Qwen2.5-0.5B-Instruct); the revision may not contain '/'" $uri) }}
{{- end }}
{{- else if eq $scheme "pvc" }}
{{- if not (regexMatch "^pvc://[a-z0-9]([-a-z0-9.]*[a-z0-9])?(/[^/].*)?$" $uri) }}
{{- $errors = append $errors (printf "model.uri=%s is not a valid PVC URI: use pvc://CLAIM/PATH with the name of an existing ReadWriteMany claim in the release namespace" $uri) }}
{{- end }}
{{- else if not $kserve }}
{{- /* another scheme on another backend: "multinode-llm.validateBackend" says it */}}
{{- else if eq $scheme "oci" }}
{{- if and $release (not (has "oci" $release.storage)) }}
{{- $errors = append $errors (printf "model.uri=%s: oci:// multi-node works from KServe 0.18 (%s); use hf://ORG/NAME (the chart stages it onto a volume) or pvc://CLAIM/PATH, or upgrade KServe and kserve.version" $uri (ternary "0.15 admits only pvc://" (ternary "0.16.0 sets up the modelcar for the head only and its pod webhook refuses every worker pod" "0.17 replaces the containers' securityContext with {runAsUser: 1010}, dropping their read-only root and capability drop" (eq $release.version "0.16.0")) (not (has "oci" $release.validator.storageSchemes)))) }}
{{- end }}
{{- else }}
{{- $errors = append $errors (printf "model.uri=%s: multi-node KServe reads the model from a volume every node shares; use hf://ORG/NAME (the chart stages it onto a ReadWriteMany volume), pvc://CLAIM/PATH%s" $uri (ternary " or oci://REGISTRY/REPO:TAG" "" (has "oci" $release.storage))) }}
{{- end }}
{{- if and $v.model.storage.existingClaim (ne $scheme "hf") }}
{{- $errors = append $errors (printf "model.storage.existingClaim=%s applies to hf:// models only; for a model already on a claim set model.uri=pvc://%s/PATH and leave model.storage.existingClaim empty" $v.model.storage.existingClaim $v.model.storage.existingClaim) }}
{{- end }}
{{- if and (include "multinode-llm.createsClaim" .) (not (has "ReadWriteMany" $v.model.storage.accessModes)) }}
{{- $errors = append $errors (printf "model.storage.accessModes=%s lacks ReadWriteMany: the head and the workers mount the model volume from different nodes; add ReadWriteMany and pick a model.storage.storageClassName that offers it (NFS, CephFS, EFS, Filestore, Azure Files)" (toJson $v.model.storage.accessModes)) }}
{{- end }}

{{- /* the model cache: a release runs one or uses one; the staging Job runs before its own release's objects */}}
{{- $cache := $v.modelCache }}
{{- if and $cache.enabled $cache.endpoint }}
{{- $errors = append $errors (printf "modelCache.endpoint=%s with modelCache.enabled=true: a release either runs the cache (enabled) or downloads through one already running (endpoint); unset modelCache.endpoint, or set modelCache.enabled=false" $cache.endpoint) }}
{{- end }}
{{- if and $cache.enabled (include "multinode-llm.stagesModel" .) }}
{{- $errors = append $errors (printf "modelCache.enabled=true with model.uri=%s: the download Job would race the cache this release starts (in Argo CD it runs in wave -1, before the cache exists), and the cache serves the whole cluster, so it should not come and go with one model; run the cache in its own release (helm install hub ./charts/multinode-llm -n model-cache --set modelCache.enabled=true), then set modelCache.endpoint here to the URL its notes print and modelCache.enabled=false" $uri) }}
{{- end }}
{{- if and $cache.storageContainer.enabled (not $cache.enabled) }}
{{- $errors = append $errors "modelCache.storageContainer.enabled=true points KServe's storage initializer at the cache this release runs, but modelCache.enabled=false; set modelCache.enabled=true, or render the storage container in the release that runs the cache" }}
{{- end }}
{{- if $cache.enabled }}
{{- $storeBytes := include "multinode-llm.quantityBytes" $cache.store.size | int64 }}
{{- if lt $storeBytes 1073741824 }}
{{- $errors = append $errors (printf "modelCache.store.size=%s is below 1Gi: a blob larger than the store is refused (model shards weigh up to 10 GB); give each node's store room for the largest model you serve, e.g. 500Gi" $cache.store.size) }}
{{- end }}
{{- end }}

{{- /* GPUs: a type KServe accepts, counted the way KServe counts */}}
{{- $standard := splitList " " (include "multinode-llm.kserveGpuTypes" .) }}
{{- $gpu := $v.gpu.resourceName }}
{{- $custom := $v.gpu.customResourceTypes | default list }}
{{- if not $kserve }}
{{- /* LeaderWorkerSet counts no GPUs: the chart gives each pod parallelism.tensor of gpu.resourceName */}}
{{- else if and (not (has $gpu $standard)) (not (has $gpu $custom)) }}
{{- $errors = append $errors (printf "gpu.resourceName=%s is not a GPU type KServe knows (%s); add it to gpu.customResourceTypes to declare it, or use one of those" $gpu (join ", " $standard)) }}
{{- else if and (not (has $gpu $standard)) $release (eq $release.controller.gpuTypesAnnotation "comma-split") }}
{{- $errors = append $errors (printf "gpu.resourceName=%s on KServe %s: its webhook wants serving.kserve.io/gpu-resource-types as a JSON array but its deployment reconciler splits it on commas, so every pod would also get %s; use a standard GPU type on this release, or KServe 0.15.1 or later" $gpu $release.version (first $standard)) }}
{{- else if and (not (has $gpu $standard)) (gt (int $v.parallelism.tensor) 1) }}
{{- $errors = append $errors (printf "gpu.resourceName=%s with parallelism.tensor=%d: KServe counts only %s when it sizes the group, so it would start tensor x pipeline = %d nodes of one GPU each; use parallelism.tensor=1 with a custom GPU type, or a standard type" $gpu (int $v.parallelism.tensor) (join ", " $standard) (mul $v.parallelism.tensor $v.parallelism.pipeline)) }}
{{- end }}
{{- /* values whose variable the accelerator's collective library has none of (accelerators.yaml) */}}
{{- $accelerator := include "multinode-llm.accelerator" . | fromJson }}
{{- $collective := $accelerator.collective }}
{{- $needs := list (list "communication.ncclDebug" (ne $v.communication.ncclDebug "") "debug") (list "communication.ncclIbDisable" $v.communication.ncclIbDisable "ibDisable") (list "rdma.enabled" $v.rdma.enabled "ibDisable") (list "rdma.hca" (and $v.rdma.enabled (ne ($v.rdma.hca | default "") "")) "ibHca") }}
{{- range $needs }}
{{- if and (index . 1) (not (index $collective (index . 2))) }}
{{- $errors = append $errors (printf "%s with gpu.resourceName=%s: %s (accelerator %s in the chart's accelerators.yaml) has no %s variable the chart knows; unset %s, or set the library's own variable in head.env and worker.env" (index . 0) $gpu $collective.library $accelerator.name (index . 2) (index . 0)) }}
{{- end }}
{{- end }}
{{- /* one serving image per accelerator: vLLM's CUDA build drives no other vendor's GPUs */}}
{{- if not (include "multinode-llm.imageRepository" .) }}
{{- if eq $accelerator.matched "default" }}
{{- $errors = append $errors (printf "gpu.resourceName=%s: no entry of the chart's accelerators.yaml claims it (by its name or its domain), so no serving image is known to drive it; set image.repository to a serving image built for it (the Dockerfile's header shows how), or add its vendor to accelerators.yaml" $gpu) }}
{{- else }}
{{- $errors = append $errors (printf "gpu.resourceName=%s: no serving image is built for its vendor, %s (accelerators.yaml: image null), and the default one, vLLM's CUDA build, cannot drive these GPUs; build the Dockerfile's serving target on %s (its header shows how) and set image.repository to it" $gpu $accelerator.name $accelerator.baseImage) }}
{{- end }}
{{- end }}
{{- range $role := list "head" "worker" }}
{{- $res := index $v $role "resources" | default dict }}
{{- range $kind := list "requests" "limits" }}
{{- range $name, $_ := index $res $kind | default dict }}
{{- if or (has $name $standard) (eq $name $gpu) }}
{{- $errors = append $errors (printf "%s.resources.%s.%s: the chart sets GPUs from parallelism.tensor and gpu.resourceName; remove it from %s.resources" $role $kind $name $role) }}
{{- else if hasKey ($v.rdma.resources | default dict) $name }}
{{- $errors = append $errors (printf "%s.resources.%s.%s: rdma.resources adds it to the head and the workers, requested and limited alike; remove it from %s.resources" $role $kind $name $role) }}
{{- else if and $kserve (not (has $name (list "cpu" "memory" "ephemeral-storage" "storage"))) (not (has $name $custom)) }}
{{- $errors = append $errors (printf "%s.resources.%s.%s: KServe rejects any extended resource it does not know as an unknown GPU type; for an RDMA device set rdma.enabled=true and rdma.resources.%s instead, for a GPU type list %s in gpu.customResourceTypes" $role $kind $name $name $name) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{- /* placement and network (docs/placement.md) */}}
{{- $errors = concat $errors (include "multinode-llm.validatePlacement" . | fromJsonArray) }}

{{- /* the executor: the KServe release that has it, Ray-only values (docs/executors.md) */}}
{{- $errors = concat $errors (include "multinode-llm.validateExecutor" . | fromJsonArray) }}

{{- /* the way in: an Ingress or HTTPRoute needs a group behind it and somewhere to attach (docs/traffic.md) */}}
{{- $errors = concat $errors (include "multinode-llm.validateTraffic" . | fromJsonArray) }}

{{- /* the compile caches: a shared one on the model's claim, in a folder of its own (docs/compile-cache.md) */}}
{{- $errors = concat $errors (include "multinode-llm.validateCompileCache" . | fromJsonArray) }}

{{- /* environment and vLLM arguments the chart or KServe own */}}
{{- $reservedEnv := include "multinode-llm.reservedGroupEnv" . | fromJson }}
{{- /* and whatever else the chart declares on both containers: KServe merges the InferenceService's
env over the runtime's by name, so a user variable would replace the chart's */}}
{{- range $var := include "multinode-llm.groupEnv" . | fromYamlArray }}
{{- if not (hasKey $reservedEnv $var.name) }}
{{- $_ := set $reservedEnv $var.name "the chart sets it on the head and the workers" }}
{{- end }}
{{- end }}
{{- range $role := list "head" "worker" }}
{{- range $i, $e := index $v $role "env" | default list }}
{{- if hasKey $reservedEnv $e.name }}
{{- $errors = append $errors (printf "%s.env[%d] sets %s: %s; remove it from %s.env" $role $i $e.name (get $reservedEnv $e.name) $role) }}
{{- end }}
{{- end }}
{{- end }}
{{- $cacheEnv := dict "POD_IP" "the chart sets it from the downward API (the cache advertises it to its peers)" "PYTHONDONTWRITEBYTECODE" "the chart sets it (the root filesystem is read-only)" }}
{{- range $i, $e := $v.modelCache.env | default list }}
{{- if hasKey $cacheEnv $e.name }}
{{- $errors = append $errors (printf "modelCache.env[%d] sets %s: %s; remove it from modelCache.env" $i $e.name (get $cacheEnv $e.name)) }}
{{- end }}
{{- end }}
{{- /* labels and annotations the chart writes (InferenceService, runtime, monitoring) */}}
{{- $errors = concat $errors (include "multinode-llm.validateOwnedKeys" . | fromJsonArray) }}
{{- $errors = concat $errors (include "multinode-llm.validateVllmArgs" . | fromJsonArray) }}

{{- if $kserve }}
{{- /* names KServe derives from the InferenceService name: isvc.<name>-predictor-worker is a label value (63 characters) */}}
{{- $fullname := include "multinode-llm.fullname" . }}
{{- if or (gt (len $fullname) 41) (not (regexMatch "^[a-z]([-a-z0-9]*[a-z0-9])?$" $fullname)) }}
{{- $errors = append $errors (printf "the InferenceService name %q (release name%s) must start with a letter, hold only a-z, 0-9 and '-', and be at most 41 characters (KServe labels pods isvc.<name>-predictor-worker); use a shorter release name or set fullnameOverride" $fullname (ternary " via fullnameOverride" " plus chart name" (not (empty $v.fullnameOverride)))) }}
{{- end }}
{{- /* KServe's raw reconciler builds the URL host <isvc>-predictor-<namespace> (the default
domainTemplate) and fails every reconcile, creating no Deployment, when that label passes a DNS
label's 63 characters (reconcilers/ingress/domain.go GenerateDomainName, every release;
kserve#4807). tests/cluster/test_findings.py shows 63 hosted and 64 refused on real KServe. */}}
{{- $hostLabel := printf "%s-predictor-%s" $fullname .Release.Namespace }}
{{- if gt (len $hostLabel) 63 }}
{{- $errors = append $errors (printf "the InferenceService name %q in namespace %q gives KServe the host label %q, %d characters, more than a DNS label's 63: KServe's reconciler fails on it and never creates the group's Deployments (reconcilers/ingress/domain.go, kserve#4807); shorten the release name (or fullnameOverride) or the namespace by %d characters" $fullname .Release.Namespace $hostLabel (len $hostLabel) (sub (len $hostLabel) 63)) }}
{{- end }}
{{- /* KServe gives the workers HEAD_SVC=GetHeadServiceName(<isvc>) but names the head Service
GetHeadServiceName(<isvc>-predictor), and that function trims one "-predictor" (constants.go,
components/predictor.go, service_reconciler.go, every release): for a name ending in -predictor the
two differ and the workers never find their head (tests/cluster/test_findings.py). */}}
{{- if hasSuffix "-predictor" $fullname }}
{{- $errors = append $errors (printf "the InferenceService name %q ends in \"-predictor\": KServe then tells the workers a head Service name (%s-head-N) other than the one it creates (%s-head-N), so the workers never find their head (constants.go GetHeadServiceName); choose a release name or fullnameOverride that does not end in -predictor" $fullname (trimSuffix "-predictor" $fullname) $fullname) }}
{{- end }}

{{- /* KServe's cluster settings the group needs, read where they can be: helm install and upgrade
see the cluster through lookup, helm template, lint and Argo CD see nothing and skip this. 0.15.x
copies a pvc:// model into an emptyDir of every pod with storageInitializer.enableDirectPvcVolumeMount
false (storage_initializer_injector.go at v0.15.2; KServe's chart sets it true): a copy per node of a
model too big for one. */}}
{{- with (lookup "v1" "ConfigMap" $v.kserve.namespace "inferenceservice-config").data }}
{{- $storage := .storageInitializer | default "{}" | fromJson }}
{{- if and (semverCompare "<0.16.0-0" $release.version) (hasKey $storage "enableDirectPvcVolumeMount") (not $storage.enableDirectPvcVolumeMount) }}
{{- $errors = append $errors (printf "KServe %s in this cluster has storageInitializer.enableDirectPvcVolumeMount=false (configmap inferenceservice-config, namespace %s): it would copy the whole model from its claim into every pod of the group; set it to true there (KServe's own chart does), or set kserve.namespace if KServe lives elsewhere" $release.version $v.kserve.namespace) }}
{{- end }}
{{- end }}
{{- end }}

{{- /* the backend: LeaderWorkerSet's own rules, or KServe's one group (docs/lws.md) */}}
{{- $errors = concat $errors (include "multinode-llm.validateBackend" . | fromJsonArray) }}
{{- $errors = concat $errors (include "multinode-llm.validatePresets" . | fromJsonArray) }}

{{- /* one kind of monitor: both would scrape every pod into the same series twice */}}
{{- if and $v.monitoring.podMonitor.enabled $v.monitoring.serviceMonitor.enabled }}
{{- $errors = append $errors "monitoring.podMonitor.enabled=true with monitoring.serviceMonitor.enabled=true: both scrape the same pods into the same series (same job and labels), so Prometheus would take every sample twice from two scrape jobs; enable one of them (PodMonitors where the Prometheus selects them, a ServiceMonitor where it only selects ServiceMonitors; docs/monitoring.md)" }}
{{- end }}

{{- /* the head must give up on a missing worker, and say so, before kubelet kills it */}}
{{- $budget := include "multinode-llm.startupBudget" $v.head.probes.startup }}
{{- if ge (int $v.group.waitTimeoutSeconds) (int $budget) }}
{{- $errors = append $errors (printf "group.waitTimeoutSeconds=%d must be shorter than the head's startup budget of %d s (head.probes.startup: initialDelaySeconds + periodSeconds x failureThreshold), so the head can exit naming the missing worker before kubelet kills it; lower group.waitTimeoutSeconds or raise head.probes.startup.failureThreshold" (int $v.group.waitTimeoutSeconds) (int $budget)) }}
{{- end }}

{{- /* what the API server would refuse about the live claim (only install and upgrade can look) */}}
{{- $errors = concat $errors (include "multinode-llm.validateLiveClaim" . | fromJsonArray) }}

{{- if $errors }}
{{- $refusal := printf "\n\nmultinode-llm: %d value(s) to fix:\n  - %s\n" (len $errors) (join "\n  - " $errors) }}
{{- fail $refusal }}
{{- /* Only helm lint gets here: its engine turns fail into an INFO line and renders on (LintMode,
pkg/engine/engine.go of Helm 3 and 4), so lint and chart-testing would pass what every install
refuses. A call of a template that does not exist is an error lint reports and fails on; its name
is the message. */}}
{{- include (trim $refusal) . }}
{{- end }}
{{- end }} {{- /* define "multinode-llm.validate" */}}

{{- /* The refusals of traffic.*, as a JSON array of messages. Context: root. */}}
{{- define "multinode-llm.validateTraffic" -}}
{{- $traffic := .Values.traffic }}
{{- $errors := list }}
{{- range $kind := list "ingress" "httpRoute" }}
{{- if and (index $traffic $kind "enabled") (not (include "multinode-llm.hasModel" $)) }}
{{- $errors = append $errors (printf "traffic.%s.enabled=true with no model.uri: this release runs only the model cache, so there is no group to route to; set traffic.%s.enabled=false here and enable it in the release that serves the model" $kind $kind) }}
{{- end }}
{{- end }}
{{- if and $traffic.httpRoute.enabled (not $traffic.httpRoute.parentRefs) }}
{{- $errors = append $errors "traffic.httpRoute.enabled=true with no traffic.httpRoute.parentRefs: an HTTPRoute attached to no Gateway carries no traffic; name the Gateway, e.g. --set traffic.httpRoute.parentRefs[0].name=inference-gateway,traffic.httpRoute.parentRefs[0].namespace=gateway-system" }}
{{- end }}
{{- $hosts := $traffic.ingress.hosts | default list }}
{{- if $hosts }}
{{- range $i, $tls := $traffic.ingress.tls }}
{{- range $tls.hosts }}
{{- if not (has . $hosts) }}
{{- $errors = append $errors (printf "traffic.ingress.tls[%d].hosts has %s, which traffic.ingress.hosts (%s) lacks: the Ingress has no rule for that host, so its certificate would serve nothing; add %s to traffic.ingress.hosts or remove it from the tls entry" $i . (join ", " $hosts) .) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- toJson $errors }}
{{- end }} {{- /* define "multinode-llm.validateTraffic" */}}

{{- /* What the API server would refuse about the live model claim, said with the fix, as a JSON
array of messages: helm install and upgrade can look the claim up; helm template, helm lint and
Argo CD cannot (lookup finds nothing), and the API server refuses it then. Context: root. */}}
{{- define "multinode-llm.validateLiveClaim" -}}
{{- $errors := list }}
{{- if include "multinode-llm.createsClaim" . }}
{{- $claim := include "multinode-llm.modelClaim" . }}
{{- $storage := .Values.model.storage }}
{{- with (lookup "v1" "PersistentVolumeClaim" .Release.Namespace $claim).spec }}
{{- $live := include "multinode-llm.quantityBytes" .resources.requests.storage | int64 }}
{{- $wanted := include "multinode-llm.quantityBytes" $storage.size | int64 }}
{{- if lt $wanted $live }}
{{- $errors = append $errors (printf "model.storage.size=%s is smaller than the volume %s has (%s): a volume cannot shrink; keep model.storage.size at %s or more" $storage.size $claim .resources.requests.storage .resources.requests.storage) }}
{{- end }}
{{- if and $storage.storageClassName (ne $storage.storageClassName (.storageClassName | default "")) }}
{{- $errors = append $errors (printf "model.storage.storageClassName=%s: the volume %s exists in class %q, and a claim's class cannot change; keep the class, or stage into a new claim (model.storage.existingClaim) and delete the old one by hand" $storage.storageClassName $claim (.storageClassName | default "")) }}
{{- end }}
{{- end }}
{{- end }}
{{- toJson $errors }}
{{- end }} {{- /* define "multinode-llm.validateLiveClaim" */}}

{{- /* The refusals of the placement and network values (RDMA, host network, secondary networks,
pod labels and annotations, extra volumes, topology spread), as a JSON array of messages, each
naming the value and the fix; "multinode-llm.validate" reports them with the others. Context: root. */}}
{{- define "multinode-llm.validatePlacement" -}}
{{- $v := .Values }}
{{- $errors := list }}
{{- $fullname := include "multinode-llm.fullname" . }}
{{- $standard := splitList " " (include "multinode-llm.kserveGpuTypes" .) }}

{{- /* RDMA: devices requested as what they are, and NCCL told to use them */}}
{{- $rdma := $v.rdma }}
{{- if $rdma.enabled }}
{{- if not $rdma.resources }}
{{- $errors = append $errors "rdma.enabled=true requests no RDMA device: set rdma.resources to the resource your RDMA device plugin advertises (e.g. rdma.resources.rdma/rdma_shared_device_a=1, or nvidia.com/hostdev=1 with SR-IOV), or set rdma.enabled=false" }}
{{- end }}
{{- range $name, $_ := $rdma.resources }}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$" $name) }}
{{- $errors = append $errors (printf "rdma.resources.%s is not an extended resource name (DOMAIN/NAME): write the resource your RDMA device plugin advertises, e.g. rdma/rdma_shared_device_a or nvidia.com/hostdev (kubectl describe node lists it under Allocatable)" $name) }}
{{- else if or (has $name $standard) (eq $name $v.gpu.resourceName) (has $name ($v.gpu.customResourceTypes | default list)) (regexMatch "(?i)/([^/]*gpu[^/]*|mig-.*)$" $name) }}
{{- $errors = append $errors (printf "rdma.resources.%s is a GPU resource: the chart requests GPUs from gpu.resourceName and parallelism.tensor; list only RDMA device resources in rdma.resources (e.g. rdma/rdma_shared_device_a, nvidia.com/hostdev)" $name) }}
{{- end }}
{{- end }}
{{- if $v.communication.ncclIbDisable }}
{{- $errors = append $errors "communication.ncclIbDisable=true with rdma.enabled=true: NCCL would leave the RDMA devices unused and talk TCP sockets; set communication.ncclIbDisable=false, or rdma.enabled=false on a cluster without InfiniBand/RoCE" }}
{{- end }}
{{- else }}
{{- range $field := list "resources" "ipcLock" "hca" }}
{{- if index $rdma $field }}
{{- $errors = append $errors (printf "rdma.%s is set but rdma.enabled=false, so it would not apply; set rdma.enabled=true, or unset rdma.%s" $field $field) }}
{{- end }}
{{- end }}
{{- end }}

{{- /* host network: Multus attaches nothing to a pod in the node's network namespace */}}
{{- if and $v.hostNetwork $v.secondaryNetworks }}
{{- $errors = append $errors (printf "secondaryNetworks=%s with hostNetwork=true: the kubelet runs no CNI plugin for a host-network pod, so Multus would attach none of them; use the node's interfaces (hostNetwork, with communication.socketIfname or rdma.hca naming them) or secondaryNetworks with hostNetwork=false" (toJson $v.secondaryNetworks)) }}
{{- end }}

{{- /* pod labels: KServe's and the chart's own win or are needed as they are */}}
{{- range $key, $_ := $v.podLabels }}
{{- if or (has $key (list "app" "component" "isvc.generation")) (regexMatch "^(internal\\.)?serving\\.kserve\\.io/" $key) (hasPrefix "app.kubernetes.io/" $key) }}
{{- $errors = append $errors (printf "podLabels.%s: KServe or the chart set this label on the group's pods (Services, the NetworkPolicy and the chart's selectors rely on it); use another key" $key) }}
{{- else if hasKey ($v.inferenceService.labels | default dict) $key }}
{{- $errors = append $errors (printf "podLabels.%s is also in inferenceService.labels: KServe copies both into the pods and inferenceService.labels wins; set it in one of them" $key) }}
{{- end }}
{{- end }}

{{- /* pod annotations: KServe drops some (serviceAnnotationDisallowedList's defaults) and sets others */}}
{{- $dropped := list "autoscaling.knative.dev/min-scale" "autoscaling.knative.dev/max-scale" "kubectl.kubernetes.io/last-applied-configuration" "modelFormat" }}
{{- range $key, $_ := $v.podAnnotations }}
{{- if eq $key "k8s.v1.cni.cncf.io/networks" }}
{{- $errors = append $errors "podAnnotations.k8s.v1.cni.cncf.io/networks: set secondaryNetworks instead (a list of NetworkAttachmentDefinition names; the chart writes the annotation)" }}
{{- else if eq $key "multinode/executor-backend" }}
{{- $errors = append $errors "podAnnotations.multinode/executor-backend: set group.executor instead (ray or mp; the chart writes KServe's annotation and tells the runtime)" }}
{{- else if has $key $dropped }}
{{- $errors = append $errors (printf "podAnnotations.%s: KServe drops this annotation before it reaches the pods (its serviceAnnotationDisallowedList); remove it" $key) }}
{{- else if regexMatch "^(internal\\.)?serving\\.kserve\\.io/|^prometheus\\.kserve\\.io/" $key }}
{{- $errors = append $errors (printf "podAnnotations.%s: KServe or the chart own this annotation; set the chart value that decides it, or inferenceService.annotations for KServe's own settings" $key) }}
{{- end }}
{{- end }}

{{- /* extra volumes: no name or path the chart or KServe use */}}
{{- $reserved := include "multinode-llm.reservedVolumes" . | fromJson }}
{{- $volumes := list }}
{{- range $i, $vol := $v.extraVolumes }}
{{- if hasKey $reserved.names $vol.name }}
{{- $errors = append $errors (printf "extraVolumes[%d].name=%s is %s; give the volume another name" $i $vol.name (get $reserved.names $vol.name)) }}
{{- else if has $vol.name $volumes }}
{{- $errors = append $errors (printf "extraVolumes[%d].name=%s is used twice; give each volume its own name" $i $vol.name) }}
{{- end }}
{{- $volumes = append $volumes $vol.name }}
{{- end }}
{{- $paths := list }}
{{- range $i, $mount := $v.extraVolumeMounts }}
{{- $path := trimSuffix "/" $mount.mountPath | default "/" }}
{{- if not (has $mount.name $volumes) }}
{{- $errors = append $errors (printf "extraVolumeMounts[%d].name=%s names no volume of extraVolumes; add the volume to extraVolumes or fix the name" $i $mount.name) }}
{{- end }}
{{- if hasKey $reserved.paths $path }}
{{- $errors = append $errors (printf "extraVolumeMounts[%d].mountPath=%s is %s; mount it elsewhere (e.g. under /mnt/extra)" $i $mount.mountPath (get $reserved.paths $path)) }}
{{- else if eq $path "/" }}
{{- $errors = append $errors (printf "extraVolumeMounts[%d].mountPath=/ would hide the image; mount it below (e.g. /mnt/extra)" $i) }}
{{- else if has $path $paths }}
{{- $errors = append $errors (printf "extraVolumeMounts[%d].mountPath=%s is mounted twice; give each mount its own path" $i $mount.mountPath) }}
{{- end }}
{{- $paths = append $paths $path }}
{{- end }}

{{- /* topology spread: a selector that counts this group's pods (none: the chart's default,
groupPodPlacement) */}}
{{- range $role := list "head" "worker" }}
{{- $podLabels := merge (dict "serving.kserve.io/inferenceservice" $fullname "component" "predictor" "app" (printf "isvc.%s-predictor%s" $fullname (ternary "-worker" "" (eq $role "worker")))) ($v.podLabels | default dict) ($v.inferenceService.labels | default dict) (include "multinode-llm.stableLabels" $ | fromYaml) }}
{{- range $i, $constraint := index $v $role "topologySpreadConstraints" }}
{{- $at := printf "%s.topologySpreadConstraints[%d]" $role $i }}
{{- if $constraint.labelSelector }}
{{- range $key, $value := $constraint.labelSelector.matchLabels }}
{{- if eq $key "isvc.generation" }}
{{- $errors = append $errors (printf "%s.labelSelector.matchLabels.isvc.generation: KServe changes it with every new generation of the InferenceService; use matchLabelKeys: [isvc.generation] to count only the pods of the same generation" $at) }}
{{- else if ne (toString (get $podLabels $key)) (toString $value) }}
{{- $errors = append $errors (printf "%s.labelSelector.matchLabels %s=%s matches no %s pod of this group (it carries %s); select serving.kserve.io/inferenceservice: %s, component: predictor, or a key of podLabels" $at $key (toString $value) $role (ternary "no such label" (printf "%s=%s" $key (get $podLabels $key)) (not (hasKey $podLabels $key))) $fullname) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- toJson $errors }}
{{- end }} {{- /* define "multinode-llm.validatePlacement" */}}

{{- /* Where head and worker containers mount the compile caches (the runtime reads the paths from
the env, docs/compile-cache.md), as JSON {"local", "shared"}. Context: any. */}}
{{- define "multinode-llm.compileCacheDirs" -}}
{{- dict "local" "/var/cache/multinode-llm/compile" "shared" "/var/cache/multinode-llm/shared" | toJson }}
{{- end }}

{{- /* The compile cache's key: a hash of what decides what vLLM compiles and the chart knows (the
model, the parallel sizes, the executor, vLLM's arguments, the image), the same on head and workers;
the runtime adds vLLM's version and the staged commit to it. Context: root. */}}
{{- define "multinode-llm.compileCacheKey" -}}
{{- $v := .Values }}
{{- $inputs := dict "model" $v.model.uri "tensor" (int $v.parallelism.tensor) "pipeline" (int $v.parallelism.pipeline) "executor" $v.group.executor "vllmArgs" ($v.vllm.args | default list) "image" (include "multinode-llm.image" .) }}
{{- toJson $inputs | sha256sum | trunc 32 }}
{{- end }}

{{- /* The compile cache's env on head and worker containers (the contract with the runtime's
compile_cache.py; nothing with compileCache.enabled=false), each line starting with a newline.
Context: root. */}}
{{- define "multinode-llm.compileCacheEnv" -}}
{{- $cache := .Values.compileCache }}
{{- if $cache.enabled }}
{{- $dirs := include "multinode-llm.compileCacheDirs" . | fromJson }}
# vLLM's compilation caches on a volume that outlives a container restart, one entry per key.
- name: MULTINODE_LLM_COMPILE_CACHE
  value: {{ $dirs.local }}
- name: MULTINODE_LLM_COMPILE_CACHE_LIMIT
  value: {{ $cache.sizeLimit | quote }}
- name: MULTINODE_LLM_COMPILE_CACHE_KEY
  value: {{ include "multinode-llm.compileCacheKey" . | quote }}
{{- if $cache.shared.enabled }}
- name: MULTINODE_LLM_COMPILE_CACHE_SHARED
  value: {{ $dirs.shared }}
- name: MULTINODE_LLM_COMPILE_CACHE_SHARED_LIMIT
  value: {{ $cache.shared.sizeLimit | quote }}
{{- end }}
{{- end }}
{{- end }} {{- /* define "multinode-llm.compileCacheEnv" */}}

{{- /* The claim model.uri's model lives on: the chart's (or the existing) claim of an hf:// model,
CLAIM of pvc://CLAIM/PATH; empty for a model on no claim (oci://). Context: root. */}}
{{- define "multinode-llm.modelClaimOfUri" -}}
{{- if include "multinode-llm.stagesModel" . }}
{{- include "multinode-llm.modelClaim" . }}
{{- else if eq (include "multinode-llm.modelScheme" .) "pvc" }}
{{- first (splitList "/" (trimPrefix "pvc://" .Values.model.uri)) }}
{{- end }}
{{- end }}

{{- /* The model's folder inside its claim: the staging folder of an hf:// model, PATH of
pvc://CLAIM/PATH (empty: the claim's root). Context: root. */}}
{{- define "multinode-llm.modelFolderOnClaim" -}}
{{- if include "multinode-llm.stagesModel" . }}
{{- include "multinode-llm.modelPath" . }}
{{- else }}
{{- rest (splitList "/" (trimPrefix "pvc://" .Values.model.uri)) | compact | join "/" }}
{{- end }}
{{- end }}

{{- /* The refusals of compileCache, as a JSON array of messages; "multinode-llm.validate" reports
them with the others. Context: root. */}}
{{- define "multinode-llm.validateCompileCache" -}}
{{- $v := .Values }}
{{- $cache := $v.compileCache }}
{{- $errors := list }}
{{- if and $cache.shared.enabled (include "multinode-llm.hasModel" .) }}
{{- $path := toString $cache.shared.path }}
{{- $claim := include "multinode-llm.modelClaimOfUri" . }}
{{- $segments := splitList "/" $path }}
{{- if not $cache.enabled }}
{{- $errors = append $errors "compileCache.shared.enabled=true with compileCache.enabled=false: the shared cache seeds and publishes the pod's own compile cache, which is off; set compileCache.enabled=true, or compileCache.shared.enabled=false" }}
{{- end }}
{{- if not $claim }}
{{- $errors = append $errors (printf "compileCache.shared.enabled=true with model.uri=%s: the shared compile cache lives on the model's ReadWriteMany claim, and this model is on none; set compileCache.shared.enabled=false (each pod keeps its own compile cache), or serve the model from hf:// or pvc://CLAIM/PATH" $v.model.uri) }}
{{- end }}
{{- if hasPrefix "/" $path }}
{{- $errors = append $errors (printf "compileCache.shared.path=%s is absolute: it names a folder inside the model's claim (a subPath); give a relative path, e.g. .multinode-llm/compile-cache" $path) }}
{{- else if or (has ".." $segments) (has "." $segments) }}
{{- $errors = append $errors (printf "compileCache.shared.path=%s holds a '.' or '..' folder: kubelet refuses a subPath that steps out of the volume, and the folder must be one place; give a relative path without them, e.g. .multinode-llm/compile-cache" $path) }}
{{- else if not (regexMatch "^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$" $path) }}
{{- $errors = append $errors (printf "compileCache.shared.path=%q is not a relative path of folder names (letters, digits, '.', '_', '-', joined by single '/'); give one, e.g. .multinode-llm/compile-cache" $path) }}
{{- else if $claim }}
{{- $model := include "multinode-llm.modelFolderOnClaim" . }}
{{- /* a model at the claim's root holds every folder; the runtime's pruning must never reach the model */}}
{{- if and $model (or (eq $model $path) (hasPrefix (printf "%s/" $path) $model) (hasPrefix (printf "%s/" $model) $path)) }}
{{- $errors = append $errors (printf "compileCache.shared.path=%s overlaps the model's folder %s on claim %s: the runtime prunes the shared folder, and the model must stay apart from it; set compileCache.shared.path to a folder beside the model's, e.g. .multinode-llm/compile-cache" $path $model $claim) }}
{{- end }}
{{- end }}
{{- end }}
{{- toJson $errors }}
{{- end }} {{- /* define "multinode-llm.validateCompileCache" */}}

{{- /* The limits values.schema.json sets on values ("x-limits": const, enum, minimum, maximum,
exclusiveMinimum, pattern with the words "is" for it, minLength, maxLength, minItems, uniqueItems,
minProperties, maxProperties), as a JSON array of messages, each naming the value, the limit and why
(the value's description, the one its comment in values.yaml gives, or the limit's own "why").
They are checked here, not by Helm's validator, which stops before any template runs and says no
why ("minimum: got 1, want 2"): so they come in the one round of "multinode-llm.validate" with the
chart's other refusals. The schema's types, keys and required fields stay Helm's. Context: dict
"value" the value, "schema" its schema node, "path" its --set path, "why" the nearest description,
"definitions" the schema's definitions. */}}
{{- define "multinode-llm.limitRefusals" -}}
{{- $node := .schema }}
{{- with index $node "$ref" }}
{{- $node = merge (omit $node "$ref") (index $.definitions (trimPrefix "#/definitions/" .)) }}
{{- end }}
{{- $why := $node.description | default .why }}
{{- $errors := list }}
{{- with index $node "x-limits" }}
{{- $broken := include "multinode-llm.limitBroken" (dict "value" $.value "limits" .) }}
{{- if $broken }}
{{- $shown := ternary $.value (toJson $.value) (kindIs "string" $.value) }}
{{- $errors = append $errors (printf "%s=%s %s: %s" $.path $shown $broken (.why | default $why)) }}
{{- end }}
{{- end }}
{{- if kindIs "map" .value }}
{{- range $key := keys .value | sortAlpha }}
{{- $child := index ($node.properties | default dict) $key }}
{{- if and (not $child) (kindIs "map" $node.additionalProperties) }}
{{- $child = $node.additionalProperties }}
{{- end }}
{{- if $child }}
{{- $path := ternary $key (printf "%s.%s" $.path $key) (eq $.path "") }}
{{- $errors = concat $errors (include "multinode-llm.limitRefusals" (dict "value" (index $.value $key) "schema" $child "path" $path "why" $why "definitions" $.definitions) | fromJsonArray) }}
{{- end }}
{{- end }}
{{- else if and (kindIs "slice" .value) (kindIs "map" $node.items) }}
{{- range $i, $item := .value }}
{{- $errors = concat $errors (include "multinode-llm.limitRefusals" (dict "value" $item "schema" $node.items "path" (printf "%s[%d]" $.path $i) "why" $why "definitions" $.definitions) | fromJsonArray) }}
{{- end }}
{{- end }}
{{- toJson $errors }}
{{- end }} {{- /* define "multinode-llm.limitRefusals" */}}

{{- /* The first limit of "x-limits" the value breaks, in words ("must be at least 2"), or nothing.
A limit applies to the values of its kind only (a pattern to strings, a minimum to numbers), as in
JSON Schema. Context: dict "value" "limits". */}}
{{- define "multinode-llm.limitBroken" -}}
{{- $v := .value }}
{{- $l := .limits }}
{{- $number := or (kindIs "float64" $v) (kindIs "int64" $v) (kindIs "int" $v) }}
{{- $broken := list }}
{{- if and (hasKey $l "const") (ne (toJson $v) (toJson $l.const)) }}
{{- $broken = append $broken (printf "must be %s" (toJson $l.const)) }}
{{- end }}
{{- if and (hasKey $l "enum") (not (has $v $l.enum)) }}
{{- $choices := list }}
{{- range $l.enum }}
{{- $choices = append $choices (ternary "\"\" (empty)" (toString .) (eq (toString .) "")) }}
{{- end }}
{{- $broken = append $broken (printf "must be one of %s" (join ", " $choices)) }}
{{- end }}
{{- if $number }}
{{- if and (hasKey $l "minimum") (lt (float64 $v) (float64 $l.minimum)) }}
{{- $broken = append $broken (printf "must be at least %s" (toString $l.minimum)) }}
{{- end }}
{{- if and (hasKey $l "exclusiveMinimum") (le (float64 $v) (float64 $l.exclusiveMinimum)) }}
{{- $broken = append $broken (printf "must be above %s" (toString $l.exclusiveMinimum)) }}
{{- end }}
{{- if and (hasKey $l "maximum") (gt (float64 $v) (float64 $l.maximum)) }}
{{- $broken = append $broken (printf "must be at most %s" (toString $l.maximum)) }}
{{- end }}
{{- end }}
{{- if kindIs "string" $v }}
{{- if and (hasKey $l "pattern") (not (regexMatch $l.pattern $v)) }}
{{- $broken = append $broken (printf "must be %s" ($l.is | default (printf "of the form %s" $l.pattern))) }}
{{- end }}
{{- if and (hasKey $l "minLength") (lt (len $v) (int $l.minLength)) }}
{{- $broken = append $broken "must not be empty" }}
{{- end }}
{{- if and (hasKey $l "maxLength") (gt (len $v) (int $l.maxLength)) }}
{{- $broken = append $broken (printf "must be at most %d characters" (int $l.maxLength)) }}
{{- end }}
{{- end }}
{{- if kindIs "slice" $v }}
{{- if and (hasKey $l "minItems") (lt (len $v) (int $l.minItems)) }}
{{- $broken = append $broken (printf "must list at least %d item(s)" (int $l.minItems)) }}
{{- end }}
{{- if and $l.uniqueItems (ne (len (uniq $v)) (len $v)) }}
{{- $broken = append $broken "must not list an item twice" }}
{{- end }}
{{- end }}
{{- if kindIs "map" $v }}
{{- if or (and (hasKey $l "minProperties") (lt (len $v) (int $l.minProperties))) (and (hasKey $l "maxProperties") (gt (len $v) (int $l.maxProperties))) }}
{{- $broken = append $broken ($l.says | default "holds too few or too many keys") }}
{{- end }}
{{- end }}
{{- join " and " $broken }}
{{- end }} {{- /* define "multinode-llm.limitBroken" */}}

{{- /* Seconds kubelet lets a container start before it restarts it: initialDelaySeconds +
periodSeconds x failureThreshold of its startup probe. Context: the probe (head.probes.startup). */}}
{{- define "multinode-llm.startupBudget" -}}
{{- add (int (.initialDelaySeconds | default 0)) (mul (int .periodSeconds) (int .failureThreshold)) }}
{{- end }}
