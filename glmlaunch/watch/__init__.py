"""``glmlaunch watch``: the margin while serving, against the plan; and ``explain-oom`` after an OOM.

Stage order: below ``supervise`` (``serve --supervise --watch`` runs a watcher on a thread) and above
``plan`` and ``calibrate`` (the plan it compares with; the runtime evidence it feeds back). One module per
concern:

* :mod:`.trace`: NVML traces, recorded (``watch --record``) and replayed behind the live source's
  interface (:class:`glmlaunch.hardware.memory.MemorySource`; live NVML is
  :class:`glmlaunch.hardware.probe.NvmlMemorySource`);
* :mod:`.ranks`: ranks to GPUs by UUID, through the deployment's ``CUDA_VISIBLE_DEVICES``;
* :mod:`.expect`: what the plan expects per rank after ready (resident memory, margin, transients);
* :mod:`.states`: each rank's state per sample (ok, warn, critical, foreign, drift);
* :mod:`.follow`: the log lines it reads (a followed file, the supervisor's stream);
* :mod:`.vllm`: vLLM's ``/metrics`` scheduler facts;
* :mod:`.snapshot`, :mod:`.render`, :mod:`.metrics`: one sample as JSON, a live table, stderr lines and
  the Prometheus endpoint;
* :mod:`.oom`: an OOM mapped to its ledger entry, and the fixes the planner computes;
* :mod:`.session`: the loop; :mod:`.commands`: the command-line functions.

docs/watch.md says what sampling sees and what it cannot.
"""
