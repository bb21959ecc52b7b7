"""The supervised launch: vLLM as glmlaunch's child, its log kept and learned from, its leftovers reaped.

``glmlaunch serve --supervise``: :mod:`glmlaunch.launch.serve` decides, then calls
:func:`.session.supervise`:

* :mod:`.session`: one run, start to exit: the boot directory, the child, the main loop, the outcome.
* :mod:`.process`: the child's session and parent-death signal, the subreaper, forwarded signals, the
  stop deadline, reaping, the process tree left behind, and ending as vLLM ended (tini's contract).
* :mod:`.tee`: the reader threads: vLLM's bytes to glmlaunch's stdout/stderr first (pipes, or a pty on
  a terminal), then to the parser's queue.
* :mod:`.stream`: the streaming side of the boot-log parser: the private copy (boot.log / serve.log),
  the timeline's markers, the first failure lines, the ready event.
* :mod:`.timeline`: the phases (load, profile, graph capture, api start) with wall times; hangs.
* :mod:`.outcome`: the outcome kind and its one-line diagnosis; the plan-vs-boot block at ready.
* :mod:`.boots`: ``<cache>/boots/<id>/`` (0700 / 0600), written before vLLM starts and after it exits.
* :mod:`.commands`: ``glmlaunch boots``: the supervised boots, and one boot's timeline.
"""
