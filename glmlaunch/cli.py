"""Command-line interface: declarations only; each command calls one plain function and renders.

Exit codes are documented in README.md and defined in ``errors.ExitCode``. Each command imports its
module when it runs, so `glmlaunch env` does not pay for the ledger, NVML or torch.

The conventions every command follows (help layout, completion, one ``error:`` line per failure) live in
``clikit.py``; tests/test_help.py walks the app, so a new command is held to them: give it ``cls=Command``,
metavars that say what to type (``-p NAME``, ``--set KEY=VALUE``) and an ``epilog=`` of example command
lines.
"""

# No `from __future__ import annotations`: Typer reads every command's signature on each run and would
# eval() each annotation string again (~5 ms of every start-up, bench/startup.py).
import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from glmlaunch.clikit import (
    PROG,
    Command,
    Group,
    complete_completion_shell,
    complete_objective,
    complete_profile,
    complete_shell,
    install_completion,
    print_version,
    run,
    show_completion,
)
from glmlaunch.output import set_quiet

# --- the app -------------------------------------------------------------------------------------------
app = typer.Typer(
    name=PROG,
    help="Resolve, validate, plan, preflight and launch GLM-5.2 on vLLM with the sparkinfer / b12x kernels.",
    epilog="""
        glmlaunch plan -p turnkey                           # the default's plan
        glmlaunch -q check -p turnkey --inventory rig.json  # rig.json: hw --save
        glmlaunch --install-completion bash                 # tab completion
    """,
    invoke_without_command=True,
    pretty_exceptions_enable=False,
    add_completion=False,  # replaced by --show-completion/--install-completion SHELL below
    rich_markup_mode=None,
    cls=Group,
    context_settings={"help_option_names": ["-h", "--help"]},
)
profiles_app = typer.Typer(
    help="List, show and describe deployment profiles.",
    epilog="""
        glmlaunch profiles list
        glmlaunch profiles show gate
    """,
    no_args_is_help=True,
    cls=Group,
)
app.add_typer(profiles_app, name="profiles")


@app.callback()
def _root(
    ctx: typer.Context,
    quiet: Annotated[
        bool,
        typer.Option(
            "--quiet",
            "-q",
            help="no notes or progress on stderr; warnings and errors stay (also GLMLAUNCH_QUIET=1)",
        ),
    ] = False,
    version: Annotated[
        bool,
        typer.Option("--version", callback=print_version, is_eager=True, help="print the version and exit"),
    ] = False,
    show_completion: Annotated[
        str | None,
        typer.Option(
            "--show-completion",
            metavar="[SHELL]",
            callback=show_completion,
            is_eager=True,
            autocompletion=complete_completion_shell,
            help="print the completion script for SHELL: bash, zsh, fish or pwsh (none or auto: this shell)",
        ),
    ] = None,
    install_completion: Annotated[
        str | None,
        typer.Option(
            "--install-completion",
            metavar="[SHELL]",
            callback=install_completion,
            is_eager=True,
            autocompletion=complete_completion_shell,
            help="install completion for SHELL in its start-up files under $HOME (none or auto: this shell)",
        ),
    ] = None,
) -> None:
    """Resolve, validate, plan, preflight and launch GLM-5.2 on vLLM with the sparkinfer / b12x kernels."""
    if quiet:
        set_quiet(True)
    if ctx.invoked_subcommand is None:
        # bare `glmlaunch`: the help is the answer, not a usage error
        typer.echo(ctx.get_help())
        raise typer.Exit(0)


ProfileOpt = Annotated[
    str | None,
    typer.Option(
        "--profile",
        "-p",
        metavar="NAME",
        autocompletion=complete_profile,
        help="profile name or path (default: $GLMLAUNCH_PROFILE or turnkey)",
    ),
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        "-s",
        metavar="KEY=VALUE",
        help="override a setting, e.g. scheduler.max_num_seqs=4 (repeatable)",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="one JSON document on stdout")]
InventoryOpt = Annotated[
    Path | None,
    typer.Option(
        "--inventory",
        metavar="FILE",
        help="a saved inventory (JSON from `hw --save`) instead of probing NVML",
    ),
]
ProfileArg = typer.Argument(metavar="NAME", autocompletion=complete_profile, help="profile name or path")


@app.command(
    "config",
    cls=Command,
    epilog="""
        glmlaunch config -p turnkey
        glmlaunch config -p gate --set memory.gpu_memory_utilization=0.93 --json
    """,
)
def config_cmd(profile: ProfileOpt = None, set_: SetOpt = None, json_: JsonOpt = False) -> None:
    """Print the resolved configuration and where every value came from."""
    from glmlaunch.config import commands

    commands.show_config(profile, set_ or [], as_json=json_)


@app.command(
    "env",
    cls=Command,
    epilog="""
        eval "$(glmlaunch env -p turnkey)"
        glmlaunch env -p gate --shell fish
    """,
)
def env_cmd(
    profile: ProfileOpt = None,
    set_: SetOpt = None,
    shell: Annotated[
        str | None,
        typer.Option(
            "--shell",
            metavar="SHELL",
            autocompletion=complete_shell,
            help="bash, zsh, sh, fish, pwsh, dotenv or json (default: detected)",
        ),
    ] = None,
) -> None:
    """Print export lines for the resolved environment, to eval in a shell."""
    from glmlaunch.config import commands

    commands.show_env(profile, set_ or [], shell=shell)


@app.command(
    "args",
    cls=Command,
    epilog="""
        glmlaunch args -p turnkey
        glmlaunch args -p gate --json
    """,
)
def args_cmd(profile: ProfileOpt = None, set_: SetOpt = None, json_: JsonOpt = False) -> None:
    """Print the `vllm serve` argument vector, one argument per line (or JSON)."""
    from glmlaunch.config import commands

    commands.show_args(profile, set_ or [], as_json=json_)


@app.command(
    "hw",
    cls=Command,
    epilog="""
        glmlaunch hw --save rig.json      # on the GPU machine: keep its inventory
        glmlaunch hw --inventory rig.json --json
    """,
)
def hw_cmd(
    json_: JsonOpt = False,
    save: Annotated[
        Path | None, typer.Option("--save", metavar="FILE", help="also write the inventory as JSON here")
    ] = None,
    inventory: InventoryOpt = None,
) -> None:
    """Show the GPU inventory NVML reports (or a saved one)."""
    from glmlaunch.hardware import commands as hwcommands

    hwcommands.show_hw(inventory, save, as_json=json_)


@app.command(
    "check",
    cls=Command,
    epilog="""
        glmlaunch check -p turnkey
        glmlaunch check -p gate --inventory rig.json --strict  # rig.json: hw --save
    """,
)
def check_cmd(
    profile: ProfileOpt = None,
    set_: SetOpt = None,
    inventory: InventoryOpt = None,
    json_: JsonOpt = False,
    strict: Annotated[bool, typer.Option("--strict", help="warnings fail too (exit 7)")] = False,
    purpose: Annotated[
        str,
        typer.Option(
            "--purpose",
            metavar="PURPOSE",
            help="serve (default) or preflight (a non-target GPU is a warning)",
            show_default=False,
        ),
    ] = "serve",
) -> None:
    """Check the hardware against a profile: one table, exit 0/3/4/7/8 (README: Exit codes)."""
    from glmlaunch.plan.check import run_check

    run_check(profile, set_ or [], inventory_file=inventory, purpose=purpose, strict=strict, as_json=json_)


@profiles_app.command(
    "list",
    cls=Command,
    epilog="""
        glmlaunch profiles list
        glmlaunch profiles list --json
    """,
)
def profiles_list_cmd(json_: JsonOpt = False) -> None:
    """List profiles with their description and inheritance."""
    from glmlaunch.config import commands

    commands.list_profiles(as_json=json_)


@profiles_app.command(
    "show",
    cls=Command,
    epilog="""
        glmlaunch profiles show turnkey
        glmlaunch profiles show turnkey > mine.yaml   # a start for your own
        glmlaunch profiles show ./mine.yaml
    """,
)
def profiles_show_cmd(name: Annotated[str, ProfileArg]) -> None:
    """Print a profile file and the chain it extends."""
    from glmlaunch.config import commands

    commands.show_profile(name)


@profiles_app.command(
    "schema",
    cls=Command,
    epilog="""
        glmlaunch profiles schema -o glmlaunch.schema.json
    """,
)
def profiles_schema_cmd(
    output: Annotated[
        Path | None, typer.Option("--output", "-o", metavar="FILE", help="write to a file instead")
    ] = None,
) -> None:
    """Print the JSON Schema of the profile format (for editors)."""
    from glmlaunch.config import commands

    commands.profile_schema(output)


@profiles_app.command(
    "import",
    cls=Command,
    epilog="""
        glmlaunch profiles import boot.log -o boot.yaml
        glmlaunch profiles import boot.log --base r12-exl3
    """,
)
def profiles_import_cmd(
    log: Annotated[Path, typer.Argument(metavar="LOG", help="a vLLM server log of one boot")],
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", metavar="FILE", help="write the profile here (default: stdout)"),
    ] = None,
    base: Annotated[
        str | None,
        typer.Option(
            "--base",
            metavar="NAME",
            autocompletion=complete_profile,
            help="profile to extend (default: the closest built-in one)",
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="overwrite an existing --output file")] = False,
) -> None:
    """Write a profile that reproduces the configuration a vLLM boot log ran with."""
    from glmlaunch.plan import profile_import

    profile_import.run_import(log, output=output, base=base, force=force)


@app.command(
    "preflight",
    cls=Command,
    epilog="""
        glmlaunch preflight -p turnkey               # on the GPUs
        glmlaunch preflight -p turnkey --device cpu  # no GPU: the same, over gloo
    """,
)
def preflight_cmd(
    profile: ProfileOpt = None,
    set_: SetOpt = None,
    backend: Annotated[
        str | None,
        typer.Option(
            "--backend",
            metavar="BACKEND",
            help="auto (the profile's library when it can run here), sparkinfer, b12x or replay "
            "(default: $GLMLAUNCH_BACKEND or auto)",
        ),
    ] = None,
    device: Annotated[
        str,
        typer.Option(
            "--device",
            metavar="DEVICE",
            help="cuda (default) or cpu (gloo, no GPU: a dry run)",
            show_default=False,
        ),
    ] = "cuda",
    timeout: Annotated[
        list[str] | None,
        typer.Option(
            "--timeout",
            metavar="[PHASE=]SECONDS",
            help="per-phase limit: SECONDS (all but build) or PHASE=SECONDS (repeatable)",
        ),
    ] = None,
    inject_fault: Annotated[str | None, typer.Option("--inject-fault", hidden=True)] = None,
    json_: JsonOpt = False,
) -> None:
    """Build the deployment's pools and plans on the real GPUs, measure them, check the margin."""
    from glmlaunch.preflight import command as preflight_command
    from glmlaunch.preflight.report import render as render_preflight

    report = preflight_command.preflight(
        profile, set_ or [], backend=backend, device=device, timeouts=timeout or [], inject_fault=inject_fault
    )
    render_preflight(report, as_json=json_)


@app.command(
    "fetch",
    cls=Command,
    epilog="""
        glmlaunch fetch -p turnkey --dry-run --offline   # revision, size, where
        glmlaunch fetch -p turnkey --dry-run --offline --json
    """,
)
def fetch_cmd(
    profile: ProfileOpt = None,
    set_: SetOpt = None,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="say what a fetch would download and where; download nothing"),
    ] = False,
    offline: Annotated[
        bool,
        typer.Option(
            "--offline",
            help="do not reach the hub (also HF_HUB_OFFLINE=1): verify what is on disk against its stamp",
        ),
    ] = False,
    repo: Annotated[
        str | None,
        typer.Option(
            "--repo",
            metavar="REPO",
            help="hub repository (owner/name) a local model.path directory is fetched from (stamped)",
        ),
    ] = None,
    json_: JsonOpt = False,
) -> None:
    """Download the profile's pinned checkpoint (model.path at model.revision), verify and stamp it."""
    from glmlaunch.fetch.commands import run_fetch

    run_fetch(profile, set_ or [], dry_run=dry_run, offline=offline, repo=repo, as_json=json_)


# --- calibrate (learn from real vLLM boots; search the knobs) ------------------------------------
calibrate_app = typer.Typer(
    help="Learn W, P, N, G_e and T-F0 from real vLLM boot logs; search the knobs with them.",
    epilog="""
        glmlaunch calibrate ingest boot.log -p r12-exl3
        glmlaunch calibrate search -p turnkey --no-write
    """,
    no_args_is_help=True,
    cls=Group,
)
app.add_typer(calibrate_app, name="calibrate")


@calibrate_app.command(
    "ingest",
    cls=Command,
    epilog="""
        glmlaunch calibrate ingest boot.log -p r12-exl3 --dry-run
        glmlaunch calibrate ingest boot.log --inventory rig.json  # from hw --save
    """,
)
def calibrate_ingest_cmd(
    logs: Annotated[
        list[Path], typer.Argument(metavar="LOG", help="vLLM boot logs (all ranks' output, as written)")
    ],
    profile: ProfileOpt = None,
    set_: SetOpt = None,
    inventory: InventoryOpt = None,
    probe: Annotated[bool, typer.Option("--probe", help="probe NVML for the GPU identity")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="parse and report; store nothing")] = False,
    json_: JsonOpt = False,
) -> None:
    """Parse boot logs per rank, store a calibration record per boot, print terms and residuals."""
    from glmlaunch.plan import calibrate_commands

    calibrate_commands.run_ingest(
        logs, profile, set_ or [], inventory_file=inventory, probe=probe, dry_run=dry_run, as_json=json_
    )


@calibrate_app.command(
    "list",
    cls=Command,
    epilog="""
        glmlaunch calibrate list --json
    """,
)
def calibrate_list_cmd(json_: JsonOpt = False) -> None:
    """List stored calibration records (corrupt or foreign files are skipped with a warning)."""
    from glmlaunch.plan import calibrate_commands

    calibrate_commands.run_list(as_json=json_)


@calibrate_app.command(
    "show",
    cls=Command,
    epilog="""
        glmlaunch calibrate show -p turnkey  # the record it would use, or why none
    """,
)
def calibrate_show_cmd(
    record: Annotated[
        str | None,
        typer.Argument(
            metavar="RECORD", help="record id or prefix (default: the record the profile matches)"
        ),
    ] = None,
    profile: ProfileOpt = None,
    set_: SetOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Show one record, or the record the profile would use and why the others do not match."""
    from glmlaunch.plan import calibrate_commands

    calibrate_commands.run_show(record, profile, set_ or [], as_json=json_)


@calibrate_app.command(
    "search",
    cls=Command,
    epilog="""
        glmlaunch calibrate search -p turnkey --no-write --json
        glmlaunch calibrate search -p gate --objective max-gmu -o gate-gmu.yaml
    """,
)
def calibrate_search_cmd(
    objective: Annotated[
        str,
        typer.Option(
            "--objective",
            metavar="OBJECTIVE",
            autocompletion=complete_objective,
            help="max-batched-tokens (default), max-prefill-capacity, max-kv-bytes, min-pool-blocks "
            "(the recommended pool pin: the smallest that holds one max_model_len request and keeps the "
            "runtime margin), max-gmu, or min-gmu (the lowest GMU whose verdict is ok)",
            show_default=False,
        ),
    ] = "max-batched-tokens",
    profile: ProfileOpt = None,
    set_: SetOpt = None,
    min_margin: Annotated[
        str | None,
        typer.Option(
            "--min-margin", metavar="SIZE", help="margin each rank keeps (default memory.min_margin)"
        ),
    ] = None,
    step: Annotated[
        int | None, typer.Option("--step", metavar="TOKENS", help="batched-token grid step (default 256)")
    ] = None,
    upper: Annotated[
        str | None, typer.Option("--max", metavar="VALUE", help="upper end of the searched range")
    ] = None,
    inventory: InventoryOpt = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output", "-o", metavar="FILE", help="overlay profile (default ./NAME-OBJECTIVE.yaml)"
        ),
    ] = None,
    no_write: Annotated[bool, typer.Option("--no-write", help="search and print; write no overlay")] = False,
    force: Annotated[bool, typer.Option("--force", help="overwrite an existing overlay file")] = False,
    json_: JsonOpt = False,
) -> None:
    """Find the largest knob value that keeps every rank's margin; write a calibrated overlay profile."""
    from glmlaunch.plan.search import run_search

    run_search(
        profile,
        set_ or [],
        objective=objective,
        min_margin=min_margin,
        step=step,
        upper=upper,
        inventory_file=inventory,
        output=output,
        write=not no_write,
        force=force,
        as_json=json_,
        command=" ".join(["glmlaunch", *sys.argv[1:]]),
    )


@app.command(
    "serve",
    cls=Command,
    epilog="""
        glmlaunch serve -p turnkey --fetch                    # the container's start
        glmlaunch serve -p turnkey --supervise --strict-exit  # vLLM as a child
        glmlaunch serve -p turnkey --supervise --watch --metrics-port 9400
        glmlaunch serve -p turnkey --dry-run -- --enable-log-requests  # runs nothing
    """,
)
def serve_cmd(
    profile: ProfileOpt = None,
    set_: SetOpt = None,
    vllm_args: Annotated[
        list[str] | None,
        typer.Argument(
            help="extra `vllm serve` arguments, after --; flags glmlaunch manages are refused",
            metavar="[-- VLLM_ARG...]",
            show_default=False,
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="print the exact argv and environment changes; start nothing")
    ] = False,
    json_: JsonOpt = False,
    skip_preflight: Annotated[
        bool, typer.Option("--skip-preflight", help="do not run the GPU preflight (stated on stderr)")
    ] = False,
    backend: Annotated[
        str | None,
        typer.Option(
            "--backend", metavar="BACKEND", help="preflight backend: auto, sparkinfer, b12x or replay"
        ),
    ] = None,
    vllm_bin: Annotated[
        str | None,
        typer.Option(
            "--vllm-bin", metavar="PATH", help="vllm executable (default: $GLMLAUNCH_VLLM_BIN, PATH)"
        ),
    ] = None,
    lmcache_bin: Annotated[
        str | None,
        typer.Option(
            "--lmcache-bin",
            metavar="PATH",
            help="lmcache executable of a managed LMCache server (default: $GLMLAUNCH_LMCACHE_BIN, PATH)",
        ),
    ] = None,
    inventory: InventoryOpt = None,
    supervise: Annotated[
        bool | None,
        typer.Option(
            "--supervise/--exec",
            help="run vLLM as a supervised child (its log kept and learned from, leftovers reaped), or exec "
            "it (default: $GLMLAUNCH_SUPERVISE, else exec; a managed LMCache server is always supervised)",
            show_default=False,
        ),
    ] = None,
    strict_exit: Annotated[
        bool,
        typer.Option(
            "--strict-exit",
            help="with --supervise: exit 9 when vLLM exits 0 after a fatal engine error in its log",
        ),
    ] = False,
    watch: Annotated[
        bool,
        typer.Option(
            "--watch",
            help="with --supervise: watch each rank's GPU memory against the plan (glmlaunch watch) while "
            "vLLM serves",
        ),
    ] = False,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            "--metrics-port", metavar="PORT", help="with --watch: serve its Prometheus metrics on this port"
        ),
    ] = None,
    metrics_host: Annotated[
        str,
        typer.Option(
            "--metrics-host", metavar="HOST", help="address the metrics bind to (default 127.0.0.1)"
        ),
    ] = "127.0.0.1",
    watch_replay: Annotated[Path | None, typer.Option("--watch-replay", hidden=True)] = None,
    fetch: Annotated[
        bool,
        typer.Option(
            "--fetch",
            help="fetch the checkpoint first when it is not on disk (glmlaunch fetch; the container's "
            "default), instead of refusing",
        ),
    ] = False,
) -> None:
    """Resolve, check, plan, preflight, then exec (or supervise) `vllm serve` (the container entrypoint)."""
    from glmlaunch.launch import serve as serve_mod

    serve_mod.validate_json_flag(as_json=json_, dry_run=dry_run)
    plan = serve_mod.serve(
        serve_mod.ServeOptions(
            profile=profile,
            overrides=tuple(set_ or ()),
            extra_args=tuple(vllm_args or ()),
            dry_run=dry_run,
            skip_preflight=skip_preflight,
            backend=backend,
            vllm_bin=vllm_bin,
            inventory=inventory,
            supervise=supervise,
            strict_exit=strict_exit,
            watch=watch,
            metrics_port=metrics_port,
            metrics_host=metrics_host,
            watch_replay=watch_replay,
            fetch=fetch,
            lmcache_bin=lmcache_bin,
        )
    )
    serve_mod.render(plan, as_json=json_)


@app.command(
    "boots",
    cls=Command,
    epilog="""
        glmlaunch boots            # every supervised boot: outcome, exit, ready time
        glmlaunch boots --json     # the same as one document (boots last: the newest)
    """,
)
def boots_cmd(
    boot: Annotated[
        str | None,
        typer.Argument(metavar="BOOT", help="a boot id, a unique prefix of one, or last (default: all)"),
    ] = None,
    json_: JsonOpt = False,
) -> None:
    """Supervised boots (serve --supervise): their outcomes, or one boot's timeline and diagnosis."""
    from glmlaunch.supervise.commands import run_boots

    run_boots(boot, as_json=json_)


# --- watch / explain-oom (the margin while serving; after an OOM) ---------------------------------
@app.command(
    "watch",
    cls=Command,
    epilog="""
        glmlaunch watch -p turnkey --metrics-port 9400     # a sidecar: live view
        glmlaunch watch -p turnkey --endpoint http://127.0.0.1:8000 --json
        glmlaunch watch -p turnkey --record trace.json --duration 60  # for --replay
    """,
)
def watch_cmd(
    profile: ProfileOpt = None,
    set_: SetOpt = None,
    gpus: Annotated[
        str | None,
        typer.Option(
            "--gpus",
            metavar="LIST",
            help="the deployment's CUDA_VISIBLE_DEVICES: indices in PCI order or GPU UUIDs, rank 0 first "
            "(default: the profile's parallel.gpus)",
        ),
    ] = None,
    gpu_memory: Annotated[
        str | None,
        typer.Option(
            "--gpu-memory", metavar="SIZE", help="T for the plan (default: the watched GPUs' usable memory)"
        ),
    ] = None,
    interval: Annotated[
        float,
        typer.Option("--interval", metavar="SECONDS", help="seconds between samples (default 0.5: 2 Hz)"),
    ] = 0.5,
    duration: Annotated[
        float | None, typer.Option("--duration", metavar="SECONDS", help="stop after this long")
    ] = None,
    samples: Annotated[
        int | None, typer.Option("--samples", metavar="N", help="stop after N samples")
    ] = None,
    endpoint: Annotated[
        str | None,
        typer.Option(
            "--endpoint",
            metavar="URL",
            help="vLLM's server, e.g. http://127.0.0.1:8000: its /metrics scheduler facts, and ready when it "
            "answers",
        ),
    ] = None,
    log: Annotated[
        Path | None,
        typer.Option("--log", metavar="FILE", help="vLLM's log, followed: its ready line and its OOMs"),
    ] = None,
    readings: Annotated[
        Path | None,
        typer.Option(
            "--readings",
            metavar="FILE",
            help="append each rank's lowest free memory after ready as `GPU N: X MiB free` lines, for "
            "calibrate ingest",
        ),
    ] = None,
    drift_window: Annotated[
        float,
        typer.Option(
            "--drift-window", metavar="SECONDS", help="how long a steady rise must last (default 600)"
        ),
    ] = 600.0,
    settle: Annotated[
        float,
        typer.Option(
            "--settle",
            metavar="SECONDS",
            help="with no ready signal: how long memory must hold still to be the baseline (default 60)",
        ),
    ] = 60.0,
    metrics_port: Annotated[
        int | None,
        typer.Option("--metrics-port", metavar="PORT", help="serve Prometheus metrics on this port (0: any)"),
    ] = None,
    metrics_host: Annotated[
        str,
        typer.Option(
            "--metrics-host", metavar="HOST", help="address the metrics bind to (default 127.0.0.1)"
        ),
    ] = "127.0.0.1",
    record: Annotated[
        Path | None,
        typer.Option("--record", metavar="FILE", help="also write every sample as an NVML trace (JSON)"),
    ] = None,
    note_: Annotated[
        str,
        typer.Option("--note", metavar="TEXT", help="with --record: what ran meanwhile, kept in the trace"),
    ] = "",
    replay: Annotated[
        Path | None,
        typer.Option("--replay", metavar="TRACE", help="read a recorded NVML trace instead of live NVML"),
    ] = None,
    speed: Annotated[
        float | None,
        typer.Option(
            "--speed",
            metavar="X",
            help="with --replay: at the recorded pace, X times faster (default: at once)",
        ),
    ] = None,
    json_: Annotated[bool, typer.Option("--json", help="one JSON object per sample on stdout")] = False,
) -> None:
    """Compare each rank's live GPU memory with the plan: ok, warn, critical, foreign, drift."""
    from glmlaunch.watch.commands import WatchArgs, run_watch

    run_watch(
        WatchArgs(
            profile=profile,
            overrides=tuple(set_ or ()),
            gpu_memory=gpu_memory,
            gpus=gpus,
            interval_s=interval,
            duration_s=duration,
            samples=samples,
            drift_window_s=drift_window,
            settle_s=settle,
            endpoint=endpoint,
            log=log,
            readings=readings,
            record=record,
            note=note_,
            replay=replay,
            speed=speed,
            metrics_host=metrics_host,
            metrics_port=metrics_port,
            as_json=json_,
            command=" ".join(["glmlaunch", *sys.argv[1:]]),
        )
    )


@app.command(
    "explain-oom",
    cls=Command,
    epilog="""
        glmlaunch explain-oom vllm.log               # as the log's configuration
        glmlaunch explain-oom -p turnkey vllm.log --json
    """,
)
def explain_oom_cmd(
    log: Annotated[Path, typer.Argument(metavar="LOG", help="the vLLM log with the OOM (all ranks' output)")],
    profile: Annotated[
        str | None,
        typer.Option(
            "--profile",
            "-p",
            metavar="NAME",
            autocompletion=complete_profile,
            help="profile name or path (default: the configuration the log booted, else $GLMLAUNCH_PROFILE "
            "or turnkey)",
        ),
    ] = None,
    set_: SetOpt = None,
    ingest: Annotated[
        bool,
        typer.Option("--ingest", help="also store the log as a calibration record (calibrate ingest)"),
    ] = False,
    json_: JsonOpt = False,
) -> None:
    """Map an OOM to the ledger entry it most likely was, and the pool pin, GMU or batch that keeps it."""
    from glmlaunch.watch.commands import run_explain_oom

    run_explain_oom(log, profile, set_ or [], as_json=json_, ingest=ingest)


# --- plan / audit / diff (the allocation ledger and the memory budget) ---------------------------
GpuMemoryOpt = Annotated[
    str | None,
    typer.Option(
        "--gpu-memory",
        metavar="SIZE",
        help="device memory per GPU, with a unit, e.g. 96GiB (default: the profile's)",
    ),
]
LibraryOpt = Annotated[
    str,
    typer.Option(
        "--library",
        metavar="LIBRARY",
        help="where layouts come from: builtin (versioned table; default), b12x (import it, ~4 s), auto",
        show_default=False,
    ),
]


@app.command(
    "plan",
    cls=Command,
    epilog="""
        glmlaunch plan -p turnkey
        glmlaunch plan -p gate --set comm.dcp_a2a_max_tokens=16 --gpu-memory 96GiB
        glmlaunch plan -p turnkey --explain dcp_a2a.slab.capture
        glmlaunch plan -p turnkey --svg turnkey.svg --json
        glmlaunch plan -p turnkey --strict
    """,
)
def plan_cmd(
    profile: ProfileOpt = None,
    set_: SetOpt = None,
    gpu_memory: GpuMemoryOpt = None,
    json_: JsonOpt = False,
    explain: Annotated[
        str | None,
        typer.Option("--explain", metavar="ENTRY", help="show one ledger entry's formula with its values"),
    ] = None,
    svg: Annotated[
        Path | None, typer.Option("--svg", metavar="FILE", help="also write the per-GPU memory map as SVG")
    ] = None,
    library: LibraryOpt = "builtin",
    strict: Annotated[
        bool,
        typer.Option("--strict", help="a caution (ok at the figures, not at the band's low edge) exits 7"),
    ] = False,
) -> None:
    """Every allocation per GPU rank, the KV budget and the margin verdict (exit 4 when it fails)."""
    from glmlaunch.plan.planner import plan_profile
    from glmlaunch.plan.render import render_plan

    result = plan_profile(profile, set_ or [], gpu_memory=gpu_memory, library=library)
    render_plan(result, as_json=json_, explain=explain, svg=svg, strict=strict)


@app.command(
    "audit",
    cls=Command,
    epilog="""
        glmlaunch audit -p gate
    """,
)
def audit_cmd(profile: ProfileOpt = None, set_: SetOpt = None, json_: JsonOpt = False) -> None:
    """What is allocated but unread or mostly unused, with bytes recoverable per rank and the fix."""
    from glmlaunch.plan.audit import run_audit
    from glmlaunch.plan.render import render_audit

    result, found = run_audit(profile, set_ or [])
    render_audit(result, found, as_json=json_)


@app.command(
    "diff",
    cls=Command,
    epilog="""
        glmlaunch diff gate turnkey
        glmlaunch diff turnkey --set comm.single_channel=true
    """,
)
def diff_cmd(
    a: Annotated[str, typer.Argument(metavar="A", autocompletion=complete_profile, help="left profile")],
    b: Annotated[
        str | None,
        typer.Argument(
            metavar="B",
            autocompletion=complete_profile,
            help="right profile (default: A again, with --set applied)",
        ),
    ] = None,
    set_: SetOpt = None,
    gpu_memory: GpuMemoryOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Two configurations side by side: settings, ledger and budget with deltas."""
    from glmlaunch.plan.diff import run_diff
    from glmlaunch.plan.render import render_diff

    render_diff(run_diff(a, b, set_ or [], gpu_memory=gpu_memory), as_json=json_)


def main() -> NoReturn:
    run(app)


if __name__ == "__main__":
    main()
