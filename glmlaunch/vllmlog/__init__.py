"""vLLM's log, read: the one grammar every stage that reads a vLLM log uses.

A vLLM log is text from several processes at once (the API server, the EngineCore, one worker per rank),
each line tagged ``(Worker_TP1_DCP1 pid=4242) INFO 11-28 10:15:32 [gpu_worker.py:312] …``, coloured on a
terminal, with progress bars redrawn by ``\\r`` and other processes' output glued onto them. Below calibrate
(which learns from what a boot logged), watch (which explains an OOM as it comes), supervise (which runs
vLLM and reads its output live) and ``explain-oom``; above config alone (the size units and the read
limits). Pure functions over strings: no stage's types, no files but the one :func:`boot.parse_log_file`
reads.

* :mod:`.lines`: physical and logical lines: ANSI codes stripped, ``\\r`` and ``\\n`` breaks, the process
  prefix that attributes each message, the rank in a worker's name;
* :mod:`.numbers`: the figures vLLM prints (``12.34 GiB``, ``1,234`` tokens) and the bound on any of them;
* :mod:`.events`: what a running vLLM says that matters at once: a CUDA out-of-memory, a free-memory
  reading, the ready line, an exception, an engine's fatal error, the boot's milestones;
* :mod:`.boot`: one boot's memory lines per rank (weights, KV cache, graphs, the free-memory budget line),
  the engine's KV size and vLLM's refusals, as a frozen :class:`~.boot.BootLog`;
* :mod:`.bootconfig`: the configuration a boot ran with (vLLM's ``non-default args``, the launcher's
  header, the workers' runtime plans), as a frozen :class:`~.bootconfig.BootConfig`.

Importing this package imports none of its modules: a command that never reads a log pays nothing.
"""
