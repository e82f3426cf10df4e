{{- /*
The LeaderWorkerSet backend (group.backend=lws, docs/lws.md): the group's pods as LeaderWorkerSet
(sigs.k8s.io/lws) runs them, groups.replicas groups of parallelism.pipeline pods. What KServe
injects on its own backend (the parallel sizes, the model mount, the served name) the chart writes
here itself, so that the same runtime starts the same group on either backend.
*/}}

{{- /* The label LeaderWorkerSet puts on every pod of the set (SetNameLabelKey, lws v0.9.0). */}}
{{- define "multinode-llm.lwsNameLabel" -}}
leaderworkerset.sigs.k8s.io/name
{{- end }}

{{- /* The spec's spec.leaderWorkerTemplate: a leader (the head) and parallelism.pipeline - 1
workers per group. Context: dict "root" $ "groupSpec" hash-or-empty. */}}
{{- define "multinode-llm.lwsTemplate" -}}
{{- with .root -}}
size: {{ .Values.parallelism.pipeline }}
restartPolicy: {{ .Values.groups.restartPolicy }}
leaderTemplate:
  {{- include "multinode-llm.lwsPod" (dict "root" . "role" "head" "groupSpec" $.groupSpec) | nindent 2 }}
workerTemplate:
  {{- include "multinode-llm.lwsPod" (dict "root" . "role" "worker" "groupSpec" $.groupSpec) | nindent 2 }}
{{- end }}
{{- end }}

{{- /* A hash of the leaderWorkerTemplate: what every pod of a group runs (the head exports it, the
readiness Job waits for it). Context: root. */}}
{{- define "multinode-llm.lwsGroupSpec" -}}
{{- include "multinode-llm.lwsTemplate" (dict "root" . "groupSpec" "") | sha256sum | trunc 16 }}
{{- end }}

{{- /* One pod template of the set. Context: dict "root" $ "role" "head"|"worker" "groupSpec". */}}
{{- define "multinode-llm.lwsPod" -}}
{{- $role := .role }}
{{- $groupSpec := .groupSpec }}
{{- with .root }}
{{- $r := index .Values $role }}
{{- $podMeta := include "multinode-llm.podMetadata" . | fromJson -}}
metadata:
  labels:
    {{- include "multinode-llm.stableLabels" . | nindent 4 }}
    app.kubernetes.io/component: {{ $role }}
    {{- with $podMeta.labels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with $podMeta.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  {{- with include "multinode-llm.groupPodPlacement" (dict "root" . "role" $role) }}
  {{- . | nindent 2 }}
  {{- end }}
  {{- with .Values.serviceAccountName }}
  serviceAccountName: {{ . }}
  {{- end }}
  securityContext:
    {{- toYaml .Values.podSecurityContext | nindent 4 }}
  {{- with $r.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $r.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $r.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  containers:
    - name: {{ $role }}
      image: {{ include "multinode-llm.image" . }}
      imagePullPolicy: {{ .Values.image.pullPolicy }}
      command: ["multinode-llm"]
      {{- if eq $role "head" }}
      args:
        - head
        - --served-model-name
        - {{ include "multinode-llm.servedModelName" . | quote }}
        {{- range .Values.vllm.args }}
        - {{ . | quote }}
        {{- end }}
      ports:
        - name: http
          containerPort: 8080
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
        {{- include "multinode-llm.groupEnv" . | nindent 8 }}
        {{- /* what KServe's multiNodeProcess injects on its backend; LWS adds LWS_LEADER_ADDRESS,
        which the worker finds its head by (config.py) */}}
        - name: PIPELINE_PARALLEL_SIZE
          value: {{ .Values.parallelism.pipeline | int | quote }}
        - name: TENSOR_PARALLEL_SIZE
          value: {{ .Values.parallelism.tensor | int | quote }}
        - name: RAY_NODE_COUNT
          value: {{ .Values.parallelism.pipeline | int | quote }}
        - name: REQUEST_GPU_COUNT
          value: {{ .Values.parallelism.tensor | int | quote }}
        {{- if eq $role "head" }}
        - name: MODEL_DIR
          value: /mnt/models
        {{- if include "multinode-llm.stagesModel" . }}
        - name: MODEL_REVISION
          value: {{ include "multinode-llm.modelRevision" . | quote }}
        {{- end }}
        - name: INFERENCE_SERVICE_NAME
          value: {{ include "multinode-llm.fullname" . | quote }}
        {{- if $groupSpec }}
        - name: MULTINODE_LLM_GROUP_SPEC
          value: {{ $groupSpec | quote }}
        {{- end }}
        {{- else }}
        - name: ISVC_NAME
          value: {{ include "multinode-llm.fullname" . | quote }}
        {{- end }}
        {{- with $r.env }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- include "multinode-llm.probes" (dict "probes" $r.probes) | nindent 6 }}
      resources:
        {{- include "multinode-llm.groupResources" (dict "root" . "role" $role) | nindent 8 }}
      securityContext:
        {{- include "multinode-llm.groupSecurityContext" . | nindent 8 }}
      volumeMounts:
        {{- include "multinode-llm.groupVolumeMounts" . | nindent 8 }}
        {{- /* as KServe mounts a pvc:// model: read-only at /mnt/models, on head and workers */}}
        - name: model
          mountPath: /mnt/models
          readOnly: true
          {{- with include "multinode-llm.modelFolderOnClaim" . }}
          subPath: {{ . | quote }}
          {{- end }}
  volumes:
    {{- include "multinode-llm.groupVolumes" . | nindent 4 }}
    - name: model
      persistentVolumeClaim:
        claimName: {{ include "multinode-llm.modelClaimOfUri" . }}
        readOnly: true
{{- end }}
{{- end }} {{- /* define "multinode-llm.lwsPod" */}}

{{- /* How many groups the readiness Job waits for: groups.replicas, or the HPA's floor. Context: root. */}}
{{- define "multinode-llm.servingGroups" -}}
{{- $groups := .Values.groups }}
{{- ternary $groups.autoscaling.minReplicas $groups.replicas $groups.autoscaling.enabled | int }}
{{- end }}

{{- /* The most groups there may be: groups.replicas, or the HPA's ceiling. Context: root. */}}
{{- define "multinode-llm.mostGroups" -}}
{{- $groups := .Values.groups }}
{{- ternary $groups.autoscaling.maxReplicas $groups.replicas $groups.autoscaling.enabled | int }}
{{- end }}

{{- /* Each group's head, by its stable name under the set's headless Service
(<set>-<group>.<set>.<namespace>, the address LWS gives its workers), as URLs of its port 8080:
the readiness Job asks every one. Context: root. */}}
{{- define "multinode-llm.leaderUrls" -}}
{{- $fullname := include "multinode-llm.fullname" . }}
{{- $urls := list }}
{{- range $group := until (include "multinode-llm.servingGroups" . | int) }}
{{- $urls = append $urls (printf "http://%s-%d.%s.%s.svc.%s:8080" $fullname $group $fullname $.Release.Namespace $.Values.clusterDomain) }}
{{- end }}
{{- toJson $urls }}
{{- end }}

{{- /* The refusals of the backend's values, as a JSON array of messages. Context: root. */}}
{{- define "multinode-llm.validateBackend" -}}
{{- $v := .Values }}
{{- $errors := list }}
{{- $fullname := include "multinode-llm.fullname" . }}
{{- if eq $v.group.backend "lws" }}
{{- $scheme := include "multinode-llm.modelScheme" . }}
{{- if and $v.model.uri (not (has $scheme (list "hf" "pvc"))) }}
{{- $errors = append $errors (printf "model.uri=%s with group.backend=lws: the chart mounts the model from a claim every node shares; use hf://ORG/NAME (the chart stages it onto a ReadWriteMany volume) or pvc://CLAIM/PATH, or group.backend=kserve for KServe's own storage" $v.model.uri) }}
{{- end }}
{{- /* LWS names pods <set>-<group>-<worker>, each a hostname (a DNS label, 63 characters) */}}
{{- $longest := printf "%s-%d-%d" $fullname (max 0 (sub (include "multinode-llm.mostGroups" . | int) 1)) (sub (int $v.parallelism.pipeline) 1) }}
{{- if or (gt (len $longest) 63) (not (regexMatch "^[a-z]([-a-z0-9]*[a-z0-9])?$" $fullname)) }}
{{- $errors = append $errors (printf "the LeaderWorkerSet name %q must start with a letter, hold only a-z, 0-9 and '-', and leave room for LeaderWorkerSet's pod names (the longest, %q, is %d characters; a pod's hostname holds 63); use a shorter release name or set fullnameOverride" $fullname $longest (len $longest)) }}
{{- end }}
{{- range $key := list "labels" "annotations" }}
{{- if index $v.inferenceService $key }}
{{- $errors = append $errors (printf "inferenceService.%s with group.backend=lws: there is no InferenceService; set pod%s for the pods, or group.backend=kserve" $key (title $key)) }}
{{- end }}
{{- end }}
{{- if eq $v.runtime.scope "Cluster" }}
{{- $errors = append $errors "runtime.scope=Cluster with group.backend=lws: there is no serving runtime (the LeaderWorkerSet carries the pods itself) and nothing cluster-scoped to share; leave runtime.scope at Namespace, or use group.backend=kserve" }}
{{- end }}
{{- if ne $v.strategy.type "Recreate" }}
{{- $errors = append $errors (printf "strategy.type=%s with group.backend=lws: LeaderWorkerSet rolls group by group; set groups.rollout (maxUnavailable, maxSurge, partition) and leave strategy.type at Recreate" $v.strategy.type) }}
{{- end }}
{{- with $v.groups.autoscaling }}
{{- if .enabled }}
{{- if gt (int .minReplicas) (int .maxReplicas) }}
{{- $errors = append $errors (printf "groups.autoscaling.minReplicas=%d is above groups.autoscaling.maxReplicas=%d: raise maxReplicas or lower minReplicas" (int .minReplicas) (int .maxReplicas)) }}
{{- end }}
{{- if not .metrics }}
{{- $errors = append $errors "groups.autoscaling.enabled=true with no groups.autoscaling.metrics: an HPA without metrics scales on CPU, which says nothing about a GPU engine's load; set one, e.g. a Pods metric vllm_num_requests_waiting with target averageValue 4 through your custom-metrics adapter (examples/values-lws.yaml)" }}
{{- end }}
{{- end }}
{{- end }}
{{- $surge := toString $v.groups.rollout.maxSurge }}
{{- $unavailable := toString $v.groups.rollout.maxUnavailable }}
{{- if and (has $surge (list "0" "0%")) (has $unavailable (list "0" "0%")) }}
{{- $errors = append $errors "groups.rollout.maxUnavailable=0 with groups.rollout.maxSurge=0: a rollout could neither stop an old group nor start a new one (LeaderWorkerSet refuses it); allow one of them, e.g. groups.rollout.maxUnavailable=1" }}
{{- end }}
{{- /* the installed LeaderWorkerSet, where helm install and upgrade can see it (helm template,
lint and Argo CD see nothing: lookup finds nothing, and kube-system is always there on a cluster) */}}
{{- $online := lookup "v1" "Namespace" "" "kube-system" }}
{{- $crd := lookup "apiextensions.k8s.io/v1" "CustomResourceDefinition" "" "leaderworkersets.leaderworkerset.x-k8s.io" }}
{{- if and $online (not $crd) }}
{{- $errors = append $errors "group.backend=lws: this cluster has no LeaderWorkerSet (CRD leaderworkersets.leaderworkerset.x-k8s.io); install it first (helm install lws oci://registry.k8s.io/lws/charts/lws --version 0.9.0 --namespace lws-system --create-namespace), or use group.backend=kserve" }}
{{- end }}
{{- with $crd }}
{{- $spec := dict }}
{{- range .spec.versions }}
{{- if eq .name "v1" }}
{{- $spec = .schema.openAPIV3Schema.properties.spec.properties }}
{{- end }}
{{- end }}
{{- $rolling := $spec.rolloutStrategy.properties.rollingUpdateConfiguration.properties | default dict }}
{{- $restarts := $spec.leaderWorkerTemplate.properties.restartPolicy.enum | default list }}
{{- if not (hasKey $rolling "partition") }}
{{- $errors = append $errors "group.backend=lws: the LeaderWorkerSet installed is older than v0.7.0 (its CRD has no rollingUpdateConfiguration.partition, which groups.rollout.partition sets); upgrade LeaderWorkerSet to v0.7.0 or later" }}
{{- end }}
{{- if not (has $v.groups.restartPolicy $restarts) }}
{{- $errors = append $errors (printf "groups.restartPolicy=%s: the LeaderWorkerSet installed knows only %s (RecreateGroupAfterStart came in v0.9.0); upgrade LeaderWorkerSet or pick one of those" $v.groups.restartPolicy (join ", " $restarts)) }}
{{- end }}
{{- end }}
{{- else }}
{{- if $v.groups.autoscaling.enabled }}
{{- $errors = append $errors "groups.autoscaling.enabled=true with group.backend=kserve: KServe allows only autoscaler class none for a multi-node InferenceService (its validator), and its group is one head Deployment; set group.backend=lws to scale groups with an HPA" }}
{{- end }}
{{- if ne (int $v.groups.replicas) 1 }}
{{- $errors = append $errors (printf "groups.replicas=%d with group.backend=kserve: an InferenceService runs one group (a second head would have no workers, kserve#4265); set group.backend=lws for several groups behind one Service, or install one release per group" (int $v.groups.replicas)) }}
{{- end }}
{{- end }}
{{- toJson $errors }}
{{- end }} {{- /* define "multinode-llm.validateBackend" */}}
