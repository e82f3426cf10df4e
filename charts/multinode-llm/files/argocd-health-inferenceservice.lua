-- Argo CD health check for the multi-node InferenceServices of the multinode-llm chart.
-- Install it as resource.customizations.health.serving.kserve.io_InferenceService in argocd-cm
-- (docs/kserve-releases.md). It reads what KServe writes, release by release:
--   * Ready True: Healthy (KServe 0.15.x and 0.20.0 report a serving group so).
--   * KServe 0.16.0 to 0.19.0 never report a multi-node InferenceService Ready: PredictorReady
--     stays Unknown with the reasons of the two Deployments' other conditions
--     ("predictor-container: MinimumReplicasAvailable, worker-container: MinimumReplicasAvailable"
--     once both are available, kserve#5703). Both Deployments available means the head is Ready,
--     which its probe allows only with the engine answering and every worker joined: Healthy.
--   * modelStatus.transitionStatus InvalidSpec or BlockedByFailedLoad, a head whose model failed to
--     load (states.targetModelState FailedToLoad: it crash-loops), or a PredictorReady that names
--     a failure: Degraded.
--   * Anything else (starting, a model loading, a rollout): Progressing.
-- Argo CD's built-in check calls such a group Progressing forever on 0.16-0.19 and never Degraded
-- from conditions. The chart's readiness Job (group-ready.yaml) is the sync's own signal.

local health = {status = "Progressing", message = "Waiting for KServe to report the InferenceService."}
if obj.status == nil then
  return health
end

local function condition(kind)
  if obj.status.conditions == nil then
    return nil
  end
  for _, c in ipairs(obj.status.conditions) do
    if c.type == kind then
      return c
    end
  end
  return nil
end

local function both_available(reason)
  if reason == nil then
    return false
  end
  return string.find(reason, "predictor-container: MinimumReplicasAvailable", 1, true) ~= nil
    and string.find(reason, "worker-container: MinimumReplicasAvailable", 1, true) ~= nil
    and string.find(reason, "Unavailable", 1, true) == nil
end

-- Reasons that stay until someone acts (KServe's InvalidGPUAllocation, InvalidWorkerSpecNotSet,
-- ReconcileFailed; the Deployment controller's FailedCreate). A ProgressDeadlineExceeded is not
-- one: KServe fixes the deadline at 600 s, and a big model loads for longer.
local failures = {
  ReplicaSetCreateError = true,
  FailedCreate = true,
  InvalidGPUAllocation = true,
  InvalidWorkerSpecNotSet = true,
  ReconcileFailed = true,
}

local model = obj.status.modelStatus
if model ~= nil then
  local target = model.states ~= nil and model.states.targetModelState or nil
  if model.transitionStatus == "InvalidSpec" or model.transitionStatus == "BlockedByFailedLoad"
    or target == "FailedToLoad" then
    health.status = "Degraded"
    health.message = "modelStatus " .. tostring(model.transitionStatus) .. ", " .. tostring(target)
    if model.lastFailureInfo ~= nil and model.lastFailureInfo.message ~= nil then
      health.message = health.message .. ": " .. model.lastFailureInfo.message
    end
    return health
  end
end

local ready = condition("Ready")
local predictor = condition("PredictorReady")
if ready ~= nil and ready.status == "True" then
  health.status = "Healthy"
  health.message = "The group serves."
  return health
end
if predictor ~= nil then
  local reason = predictor.reason or ""
  if predictor.status == "Unknown" and both_available(reason) then
    health.status = "Healthy"
    health.message = "The group serves (KServe reports PredictorReady Unknown for every multi-node group before 0.20, kserve#5703)."
    return health
  end
  if predictor.status == "True" then
    health.status = "Healthy"
    health.message = "The group serves."
    return health
  end
  for name, _ in pairs(failures) do
    if string.find(reason, name, 1, true) ~= nil then
      health.status = "Degraded"
      health.message = "PredictorReady " .. predictor.status .. ": " .. reason
      return health
    end
  end
  health.message = "PredictorReady " .. predictor.status .. (reason ~= "" and (": " .. reason) or "")
end
return health
