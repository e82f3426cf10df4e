-- Argo CD health check for the multi-node InferenceServices of the multinode-llm chart.
-- Install it as resource.customizations.health.serving.kserve.io_InferenceService in argocd-cm
-- (docs/kserve-releases.md). It reads what KServe writes, release by release:
--   * Ready True: Healthy (KServe 0.15.x and 0.20.0 report a serving group so).
--   * KServe 0.16.0 to 0.19.0 never report a multi-node InferenceService Ready (kserve#5703):
--     PredictorReady stays Unknown once both Deployments are available, its reason the reasons
--     of the conditions each Deployment lists before Progressing ("predictor-container:
--     MinimumReplicasAvailable, worker-container: MinimumReplicasAvailable", or "" once a restart
--     has moved Progressing first). Both Deployments available means the head is Ready, which its
--     probe allows only with the engine answering and every worker joined: Healthy.
--   * modelStatus.transitionStatus InvalidSpec or BlockedByFailedLoad, a head whose model failed to
--     load (states.targetModelState FailedToLoad: it crash-loops), or a PredictorReady that names
--     a failure: Degraded.
--   * Anything else (starting, a model loading, a rollout, a member restarting): Progressing. A
--     member lost after the group served reads as Progressing, as Argo CD's own Deployment check
--     reads a lost pod: on 0.16-0.19 it looks exactly like the first second of a rollout, and a
--     Degraded there would fail the sync (gitops-engine fails an operation on a Degraded object).
-- Argo CD's built-in check calls such a group Progressing forever on 0.16-0.19 and never Degraded
-- from conditions. The chart's readiness Job (group-ready.yaml) is the sync's own signal.
--
-- Argo CD runs a check from argocd-cm without Lua's string library (only base, table and a safe
-- os: util/lua/lua.go; resource.customizations.useOpenLibs would open it, with io and all of os).
-- So this script never searches a string: it compares whole reasons, and reads KServe's joined
-- reason of two Deployments by building each possible one.

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

-- The reasons a Deployment's conditions carry (Kubernetes' deployment controller), and "" for a
-- Deployment that has none yet.
local deployment_reasons = {
  "MinimumReplicasAvailable", "MinimumReplicasUnavailable", "NewReplicaSetCreated",
  "FoundNewReplicaSet", "ReplicaSetUpdated", "NewReplicaSetAvailable", "ProgressDeadlineExceeded",
  "ReplicaSetCreateError", "FailedCreate", "FailedDelete", "DeploymentPaused", "DeploymentResumed", "",
}

-- KServe joins the head's and the workers' reasons into one ("predictor-container: A,
-- worker-container: B", or one side alone when the other Deployment gave none): the two (nil for
-- a side not named), or nothing for any other reason.
local function joined(reason)
  for _, head in ipairs(deployment_reasons) do
    if reason == "predictor-container: " .. head then
      return true, head, nil
    end
    if reason == "worker-container: " .. head then
      return true, nil, head
    end
    for _, worker in ipairs(deployment_reasons) do
      if reason == "predictor-container: " .. head .. ", worker-container: " .. worker then
        return true, head, worker
      end
    end
  end
  return false, nil, nil
end

-- Whether every reason KServe joined into ``reason`` is ``wanted`` (an empty reason: none is).
local function only(reason, wanted)
  if reason == "" then
    return true
  end
  local parsed, head, worker = joined(reason)
  return parsed and (head == nil or head == wanted) and (worker == nil or worker == wanted)
end

-- Reasons that stay until someone acts (KServe's InvalidGPUAllocation, InvalidWorkerSpecNotSet,
-- ReconcileFailed; the Deployment controller's FailedCreate). A ProgressDeadlineExceeded is not
-- one: KServe fixes the deadline at 600 s, and a big model loads for longer.
local failures = {
  ReplicaSetCreateError = true,
  FailedCreate = true,
  FailedDelete = true,
  InvalidGPUAllocation = true,
  InvalidWorkerSpecNotSet = true,
  ReconcileFailed = true,
}

local function failure(reason)
  if failures[reason] then
    return true
  end
  local parsed, head, worker = joined(reason)
  return parsed and ((head ~= nil and failures[head]) or (worker ~= nil and failures[worker])) == true
end

local model = obj.status.modelStatus
if model ~= nil then
  local target = model.states ~= nil and model.states.targetModelState or nil
  if model.transitionStatus == "InvalidSpec" or model.transitionStatus == "BlockedByFailedLoad"
    or target == "FailedToLoad" then
    health.status = "Degraded"
    health.message = "modelStatus " .. tostring(model.transitionStatus) .. ", " .. tostring(target)
    if model.lastFailureInfo ~= nil and model.lastFailureInfo.message ~= nil then
      health.message = health.message .. ": " .. tostring(model.lastFailureInfo.message)
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
  -- Unknown comes with both Deployments available on 0.16-0.19 only (0.20 keeps it while
  -- Available is not yet reported, with the Deployments' own Progressing reasons).
  if predictor.status == "Unknown" and only(reason, "MinimumReplicasAvailable") then
    health.status = "Healthy"
    health.message = "The group serves (KServe reports PredictorReady Unknown for every multi-node group before 0.20, kserve#5703)."
    return health
  end
  if predictor.status == "True" then
    health.status = "Healthy"
    health.message = "The group serves."
    return health
  end
  if failure(reason) then
    health.status = "Degraded"
    health.message = "PredictorReady " .. tostring(predictor.status) .. ": " .. reason
    return health
  end
  health.message = "PredictorReady " .. tostring(predictor.status) .. (reason ~= "" and (": " .. reason) or "")
  if predictor.status == "False" and reason ~= "" and only(reason, "NewReplicaSetAvailable") then
    health.message = "A member of the serving group is not ready; it restarts in place (" .. health.message .. ")."
  end
end
return health
