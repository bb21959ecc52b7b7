"""Stage 3b — the checkpoint on disk: ``glmlaunch fetch`` and the weights check of ``serve``.

The profile pins a checkpoint (``model.path``: a hub repository id or a local directory, and
``model.revision``); this stage puts exactly that revision where vLLM will load it from and says whether it
is there. It sits after ``hardware`` (upstream's entrypoint refuses to download for a host that would fail
GPU initialization, and glmlaunch's check stage runs first in ``serve``) and before ``calibrate`` and
``plan``, which may price the weights from the fetched safetensors payload (:mod:`.payload`). It imports the
config, the ledger (the payload's per-rank figure) and nothing later.

* :mod:`.target`: where the checkpoint goes (the hub cache of the launch environment, or a local
  directory) and the repository it comes from.
* :mod:`.stamp`: the identity stamp (repository, revision, completion, file list) and upstream's markers;
  one model is never downloaded on top of another.
* :mod:`.disk`: what is on disk (names and sizes), partial leftovers, the free space at the destination.
* :mod:`.hub`: the one module that talks to the hub (``huggingface_hub``): the revision's file metadata,
  the access check, the resumable download; hub failures as one-line errors.
* :mod:`.documented`: the download sizes upstream documents (for a dry run without the hub).
* :mod:`.payload`: :class:`~.payload.WeightsPayload` / :class:`~.payload.FetchedCheckpoint`, the typed
  result the plan can price the weights from.
* :mod:`.run`: the fetch itself, in order: identity, metadata, space, stamp, download, verify, stamp.
* :mod:`.status`: ``serve``'s weights check (part of its preflight stage): present, or fetched with
  ``--fetch``, or a refusal naming ``glmlaunch fetch``; and the checkpoint as the plan prices W from it
  (``checkpoint_on_disk``: its verified payload, or why it is ignored).
* :mod:`.commands`: ``glmlaunch fetch``'s output (text and ``--json``).
"""
