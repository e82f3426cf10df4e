{{- /*
The group's objects as KServe reads them: the runtime's spec and the InferenceService's predictor.
They are defines, so that "multinode-llm.groupSpec" can hash exactly what reaches the group's pods.
*/}}

{{- /* The (Cluster)ServingRuntime's spec; with groupSpec (the hash of the rest) the head is told
it (the readiness Job waits for the head that exports it). Context: dict "root" $ "groupSpec"
hash-or-empty. */}}
{{- define "multinode-llm.runtimeSpec" -}}
{{- $groupSpec := .groupSpec }}
{{- with .root -}}
{{- /* No prometheus.kserve.io/port or /path: KServe reads them for Serverless's queue-proxy
(metrics aggregation) and for the OTel collector of KEDA autoscaling only, neither of which a
multi-node group runs (pod/metrics_aggregate_injector.go, otel_reconciler.go, v0.15-v0.20); the
PodMonitors (monitoring.podMonitor) and the ServiceMonitor's Service (monitoring.serviceMonitor)
name the metrics ports. */ -}}
{{- /* podLabels and podAnnotations on the runtime's head and workerSpec: KServe copies them into
the head's and the workers' pod templates (buildObjectMeta, reconcileWorker, components/predictor.go,
every release) */}}
{{- $podMeta := include "multinode-llm.podMetadata" . | fromJson }}
{{- $annotations := merge (include "multinode-llm.gpuTypesAnnotation" . | fromYaml) (include "multinode-llm.executorAnnotation" . | fromYaml) $podMeta.annotations }}
{{- with $podMeta.labels -}}
labels:
  {{- toYaml . | nindent 2 }}
{{ end -}}
{{- with $annotations -}}
annotations:
  {{- toYaml . | nindent 2 }}
{{ end -}}
# The InferenceService names this runtime, so it needs no auto-selection: without autoSelect
# (and priority) KServe's runtime webhook never compares it with its own huggingface runtimes or
# another release's (validateServingRuntimePriority, servingruntime_webhook.go, every release).
supportedModelFormats:
  - name: huggingface
    version: "1"
    autoSelect: false
protocolVersions:
  - v2
  - v1
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
containers:
  - name: kserve-container
    image: {{ include "multinode-llm.image" . }}
    imagePullPolicy: {{ .Values.image.pullPolicy }}
    command: ["multinode-llm"]
    args: ["head"]
    # The first port is the one KServe's Service targets (80 -> 8080). KServe's service
    # reconciler (createDefaultSvc, v0.15-v0.20) adds every further port to the predictor Service
    # as itself: 8081 named status, the supervisor's probes, /status and /metrics (the
    # NetworkPolicy opens it to networkPolicy.clients like 8080). The names are what the PodMonitor
    # scrapes.
    ports:
      - name: http
        containerPort: 8080
        protocol: TCP
      - name: status
        containerPort: 8081
        protocol: TCP
    env:
      {{- include "multinode-llm.groupEnv" . | nindent 6 }}
      {{- if $groupSpec }}
      {{- /* the head tells which spec it runs: the readiness Job waits for this one */}}
      - name: MULTINODE_LLM_GROUP_SPEC
        value: {{ $groupSpec | quote }}
      {{- end }}
    {{- include "multinode-llm.probes" (dict "probes" .Values.head.probes) | nindent 4 }}
    securityContext:
      {{- include "multinode-llm.groupSecurityContext" . | nindent 6 }}
    volumeMounts:
      {{- include "multinode-llm.groupVolumeMounts" . | nindent 6 }}
volumes:
  {{- include "multinode-llm.groupVolumes" . | nindent 2 }}
workerSpec:
  # KServe 0.15.0's runtime webhook requires both sizes (pipeline at least 2); the
  # InferenceService's own workerSpec overrides them on every release.
  pipelineParallelSize: {{ .Values.parallelism.pipeline }}
  tensorParallelSize: {{ .Values.parallelism.tensor }}
  {{- with $podMeta.labels }}
  labels:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $podMeta.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  containers:
    - name: worker-container
      image: {{ include "multinode-llm.image" . }}
      imagePullPolicy: {{ .Values.image.pullPolicy }}
      command: ["multinode-llm"]
      args: ["worker"]
      # Named for the PodMonitor; KServe makes no Service of the workers' ports.
      ports:
        - name: status
          containerPort: 8081
          protocol: TCP
      env:
        {{- include "multinode-llm.groupEnv" . | nindent 8 }}
      {{- include "multinode-llm.probes" (dict "probes" .Values.worker.probes) | nindent 6 }}
      securityContext:
        {{- include "multinode-llm.groupSecurityContext" . | nindent 8 }}
      volumeMounts:
        {{- include "multinode-llm.groupVolumeMounts" . | nindent 8 }}
  volumes:
    {{- include "multinode-llm.groupVolumes" . | nindent 4 }}
{{- end }}
{{- end }} {{- /* define "multinode-llm.runtimeSpec" */}}

{{- /* The InferenceService's spec.predictor, naming the runtime of groupSpec (the hash of the
rest; empty while it is computed). Context: dict "root" $ "groupSpec" hash-or-empty. */}}
{{- define "multinode-llm.isvcPredictor" -}}
{{- $groupSpec := .groupSpec }}
{{- with .root -}}
minReplicas: {{ .Values.inferenceService.minReplicas }}
maxReplicas: {{ .Values.inferenceService.maxReplicas }}
deploymentStrategy:
  type: {{ .Values.strategy.type }}
{{- with include "multinode-llm.groupPodPlacement" (dict "root" . "role" "head") }}
{{ . }}
{{- end }}
{{- with .Values.serviceAccountName }}
serviceAccountName: {{ . }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.head.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.head.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.head.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
model:
  modelFormat:
    name: huggingface
  runtime: {{ include "multinode-llm.runtimeName" (dict "root" . "groupSpec" $groupSpec) }}
  storageUri: {{ include "multinode-llm.storageUri" . | quote }}
  # Appended to the runtime's ["head"]: the served name, then vLLM's own arguments.
  # KServe runs a Go template over the head container: double braces are escaped so that every
  # argument and value reaches vLLM as written.
  args:
    - --served-model-name
    - {{ include "multinode-llm.kserveTemplateText" (include "multinode-llm.servedModelName" .) | quote }}
    {{- range .Values.vllm.args }}
    - {{ include "multinode-llm.kserveTemplateText" . | quote }}
    {{- end }}
  {{- $headEnv := .Values.head.env | default list }}
  {{- if include "multinode-llm.stagesModel" . }}
  {{- /* the head serves the snapshot this revision was staged as (staging/layout.py) */}}
  {{- $headEnv = prepend $headEnv (dict "name" "MODEL_REVISION" "value" (include "multinode-llm.modelRevision" .)) }}
  {{- end }}
  {{- with $headEnv }}
  {{- $env := list }}
  {{- range . }}
  {{- $var := deepCopy . }}
  {{- if hasKey $var "value" }}
  {{- $_ := set $var "value" (include "multinode-llm.kserveTemplateText" $var.value) }}
  {{- end }}
  {{- $env = append $env $var }}
  {{- end }}
  env:
    {{- toYaml $env | nindent 4 }}
  {{- end }}
  resources:
    {{- include "multinode-llm.groupResources" (dict "root" . "role" "head") | nindent 4 }}
workerSpec:
  pipelineParallelSize: {{ .Values.parallelism.pipeline }}
  tensorParallelSize: {{ .Values.parallelism.tensor }}
  {{- with .Values.serviceAccountName }}
  serviceAccountName: {{ . }}
  {{- end }}
  {{- with include "multinode-llm.groupPodPlacement" (dict "root" . "role" "worker") }}
  {{- . | nindent 2 }}
  {{- end }}
  securityContext:
    {{- toYaml .Values.podSecurityContext | nindent 4 }}
  {{- with .Values.worker.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.worker.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.worker.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  containers:
    - name: worker-container
      {{- $env := concat (include "multinode-llm.workerEnvGaps" . | fromYamlArray) (.Values.worker.env | default list) }}
      {{- with $env }}
      env:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      resources:
        {{- include "multinode-llm.groupResources" (dict "root" . "role" "worker") | nindent 8 }}
{{- end }}
{{- end }} {{- /* define "multinode-llm.isvcPredictor" */}}

{{- /* Pod fields of the predictor (head) or its workerSpec that place the pod and pick its
network: priorityClassName, topologySpreadConstraints, hostNetwork with the DNS policy that keeps
Service names resolving. KServe takes them from the InferenceService only (MergePodSpec takes no
such field from the runtime, utils/utils.go, every release). Context: dict "root" $ "role". */}}
{{- define "multinode-llm.groupPodPlacement" -}}
{{- $v := .root.Values }}
{{- $fields := dict }}
{{- with $v.priorityClassName }}
{{- $_ := set $fields "priorityClassName" . }}
{{- end }}
{{- if $v.hostNetwork }}
{{- $_ := set $fields "hostNetwork" true }}
{{- $_ := set $fields "dnsPolicy" "ClusterFirstWithHostNet" }}
{{- end }}
{{- $fullname := include "multinode-llm.fullname" .root }}
{{- $constraints := list }}
{{- range (index $v .role).topologySpreadConstraints }}
{{- $constraint := deepCopy . }}
{{- /* without a selector the scheduler counts no pod: default to every pod of this group, of
its current generation (the backend labels both roles with the group's name) */}}
{{- if not $constraint.labelSelector }}
{{- $_ := set $constraint "labelSelector" (dict "matchLabels" (include "multinode-llm.groupSelector" $.root | fromYaml)) }}
{{- if not (hasKey $constraint "matchLabelKeys") }}
{{- $_ := set $constraint "matchLabelKeys" (list (include "multinode-llm.generationLabel" $.root)) }}
{{- end }}
{{- end }}
{{- $constraints = append $constraints $constraint }}
{{- end }}
{{- with $constraints }}
{{- $_ := set $fields "topologySpreadConstraints" . }}
{{- end }}
{{- with $fields }}{{ toYaml . }}{{ end }}
{{- end }}

{{- /* A hash of everything that restarts the group: the runtime's spec, the InferenceService's
labels and annotations (KServe copies both into the pod templates) and its whole predictor, but
not the runtime's name (the hash names it). The Deployments' own settings (strategy, replicas) are
in it too: a change of them is a new generation, which KServe writes into both pod templates
(label isvc.generation: components/predictor.go, v0.15.0 to v0.20.0), so the group restarts, and
the readiness Job (named after this hash) must wait for it. Context: root. */}}
{{- define "multinode-llm.groupSpec" -}}
{{- $isvcMeta := dict "labels" .Values.inferenceService.labels "annotations" .Values.inferenceService.annotations }}
{{- $_ := set $isvcMeta "kserve" (list (include "multinode-llm.deploymentMode" .) (include "multinode-llm.requiredAutoscalerClass" .) (include "multinode-llm.gpuTypesAnnotation" .)) }}
{{- $predictor := include "multinode-llm.isvcPredictor" (dict "root" . "groupSpec" "") | fromYaml }}
{{- $parts := list (include "multinode-llm.runtimeSpec" (dict "root" . "groupSpec" "")) (toJson $isvcMeta) (toJson $predictor) }}
{{- join "\n---\n" $parts | sha256sum | trunc 16 }}
{{- end }}

{{- /* The readiness Job's name: a Job's pod template cannot change, so the name carries a hash of
its spec (which holds the group's spec hash). Context: root. */}}
{{- define "multinode-llm.readinessJobName" -}}
{{- printf "%s-ready-%s" (include "multinode-llm.fullname" .) (include "multinode-llm.readinessJobSpec" . | sha256sum | trunc 8) }}
{{- end }}

{{- /* The readiness Job's spec (group-ready.yaml). Context: root. */}}
{{- define "multinode-llm.readinessJobSpec" -}}
{{- $lws := eq .Values.group.backend "lws" }}
{{- $spec := ternary (include "multinode-llm.lwsGroupSpec" .) (include "multinode-llm.groupSpec" .) $lws }}
{{- $budget := include "multinode-llm.startupBudget" .Values.head.probes.startup | int }}
{{- $timeout := add $budget (ternary .Values.download.activeDeadlineSeconds 0 (not (empty (include "multinode-llm.stagesModel" .)))) -}}
backoffLimit: 2
activeDeadlineSeconds: {{ add $timeout 300 }}
template:
  metadata:
    labels:
      {{- include "multinode-llm.selectorLabels" . | nindent 6 }}
      app.kubernetes.io/component: readiness
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
      - name: await-group
        image: {{ include "multinode-llm.imageRef" (dict "image" .Values.download.image "root" .) }}
        imagePullPolicy: {{ .Values.download.image.pullPolicy }}
        command: ["multinode-llm"]
        {{- /* The predictor Service's port 80, then the head's container port: a KServe with
        serviceClusterIPNone makes that Service headless (service_reconciler.go), and its name then
        resolves to the head pod, which listens on 8080 only. */}}
        {{- $predictor := include "multinode-llm.predictorUrl" . }}
        args:
          - await-group
          {{- if $lws }}
          {{- /* every group's head by its own name: the Service would answer from any one */}}
          - --every
          {{- range include "multinode-llm.leaderUrls" . | fromJsonArray }}
          - {{ . | quote }}
          {{- end }}
          {{- else }}
          - {{ $predictor | quote }}
          - {{ printf "%s:8080" $predictor | quote }}
          {{- end }}
          - --model
          - {{ include "multinode-llm.servedModelName" . | quote }}
          - --group-spec
          - {{ $spec | quote }}
          - --timeout
          - {{ $timeout | quote }}
        resources:
          requests:
            cpu: 10m
            memory: 64Mi
          limits:
            cpu: 200m
            memory: 128Mi
        securityContext:
          {{- toYaml .Values.securityContext | nindent 10 }}
{{- end }} {{- /* define "multinode-llm.readinessJobSpec" */}}

{{- /* KServe's multi-node executor backend annotation, only for group.executor=mp: the controller
reads it from the runtime's spec.annotations (sRuntime.Annotations[constants.
MultiNodeExecutorBackendAnnotationKey] == "mp" in multiNodeProcess, components/predictor.go, and
MultiNodeExecutorBackendAnnotationKey = "multinode/executor-backend" in pkg/constants/constants.go,
v0.18.0 on; earlier releases ignore it) and then sizes the group with computeMpNodeAndGPUs: nodes =
pipelineParallelSize, GPUs per pod = tensorParallelSize. KServe copies spec.annotations into the
head's pod only (buildObjectMeta), never into the workers' (reconcileWorker takes
workerSpec.annotations), so groupEnv tells both containers. Context: root. */}}
{{- define "multinode-llm.executorAnnotation" -}}
{{- if eq .Values.group.executor "mp" -}}
multinode/executor-backend: mp
{{- end }}
{{- end }}
