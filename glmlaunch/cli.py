"""Command-line interface: declarations only; each command calls one plain function and renders.

Exit codes are documented in README.md and defined in ``errors.ExitCode``. Each command imports its
module when it runs, so `glmlaunch env` does not pay for the ledger, NVML or torch.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from glmlaunch.errors import ExitCode, GlmlaunchError
from glmlaunch.output import debug_enabled, mask_secrets, printable, reset_secrets

app = typer.Typer(
    name="glmlaunch",
    help="Resolve, validate, plan, preflight and launch GLM-5.2 on vLLM with the sparkinfer / b12x kernels.",
    invoke_without_command=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,
)
profiles_app = typer.Typer(help="List, show and describe deployment profiles.", no_args_is_help=True)
app.add_typer(profiles_app, name="profiles")


def _version(value: bool) -> None:
    if value:
        from glmlaunch import __version__

        sys.stdout.write(f"glmlaunch {__version__}\n")
        raise typer.Exit()


@app.callback()
def _root(
    ctx: typer.Context,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="print the version and exit")
    ] = False,
) -> None:
    """Resolve, validate, plan, preflight and launch GLM-5.2 on vLLM with the sparkinfer / b12x kernels."""
    if ctx.invoked_subcommand is None:
        # bare `glmlaunch`: the help is the answer, not a usage error
        typer.echo(ctx.get_help())
        raise typer.Exit(0)

ProfileOpt = Annotated[
    str | None,
    typer.Option("--profile", "-p", help="profile name or path (default: $GLMLAUNCH_PROFILE or turnkey)"),
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", "-s", help="override a setting: dotted.key=value (repeatable)"),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="one JSON document on stdout")]


@app.command("config")
def config_cmd(profile: ProfileOpt = None, set_: SetOpt = None, json_: JsonOpt = False) -> None:
    """Print the resolved configuration and where every value came from."""
    from glmlaunch.config import commands

    commands.show_config(profile, set_ or [], as_json=json_)


@app.command("env")
def env_cmd(
    profile: ProfileOpt = None,
    set_: SetOpt = None,
    shell: Annotated[
        str | None,
        typer.Option("--shell", help="bash, zsh, sh, fish, pwsh, dotenv or json (default: detected)"),
    ] = None,
) -> None:
    """Print export lines for the resolved environment: eval "$(glmlaunch env -p NAME)"."""
    from glmlaunch.config import commands

    commands.show_env(profile, set_ or [], shell=shell)


@app.command("args")
def args_cmd(profile: ProfileOpt = None, set_: SetOpt = None, json_: JsonOpt = False) -> None:
    """Print the `vllm serve` argument vector, one argument per line (or JSON)."""
    from glmlaunch.config import commands

    commands.show_args(profile, set_ or [], as_json=json_)


InventoryOpt = Annotated[
    Path | None,
    typer.Option("--inventory", help="a saved inventory (JSON from `hw --save`) instead of probing NVML"),
]


@app.command("hw")
def hw_cmd(
    json_: JsonOpt = False,
    save: Annotated[Path | None, typer.Option("--save", help="also write the inventory as JSON here")] = None,
    inventory: InventoryOpt = None,
) -> None:
    """Show the GPU inventory NVML reports (or a saved one)."""
    from glmlaunch.hardware import commands as hwcommands

    hwcommands.show_hw(inventory, save, as_json=json_)


@app.command("check")
def check_cmd(
    profile: ProfileOpt = None,
    set_: SetOpt = None,
    inventory: InventoryOpt = None,
    json_: JsonOpt = False,
    strict: Annotated[bool, typer.Option("--strict", help="warnings fail too (exit 7)")] = False,
    purpose: Annotated[
        str, typer.Option("--purpose", help="serve (default) or preflight (a non-target GPU is a warning)")
    ] = "serve",
) -> None:
    """Check the hardware against a profile: one table, exit 0/3/4/7/8 (README: Exit codes)."""
    from glmlaunch.calibrate.apply import calibration_for
    from glmlaunch.hardware import commands as hwcommands

    hwcommands.run_check(
        profile,
        set_ or [],
        inventory_file=inventory,
        purpose=purpose,
        strict=strict,
        as_json=json_,
        calibration_lookup=calibration_for,
    )


@profiles_app.command("list")
def profiles_list_cmd(json_: JsonOpt = False) -> None:
    """List profiles with their description and inheritance."""
    from glmlaunch.config import commands

    commands.list_profiles(as_json=json_)


@profiles_app.command("show")
def profiles_show_cmd(name: Annotated[str, typer.Argument(help="profile name or path")]) -> None:
    """Print a profile file and the chain it extends."""
    from glmlaunch.config import commands

    commands.show_profile(name)


@profiles_app.command("schema")
def profiles_schema_cmd(
    output: Annotated[Path | None, typer.Option("--output", "-o", help="write to a file instead")] = None,
) -> None:
    """Print the JSON Schema of the profile format (for editors)."""
    from glmlaunch.config import commands

    commands.profile_schema(output)


@profiles_app.command("import")
def profiles_import_cmd(
    log: Annotated[Path, typer.Argument(help="a vLLM server log of one boot")],
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="write the profile here (default: stdout)")
    ] = None,
    base: Annotated[
        str | None, typer.Option("--base", help="profile to extend (default: the closest built-in one)")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="overwrite an existing --output file")] = False,
) -> None:
    """Write a profile that reproduces the configuration a vLLM boot log ran with."""
    from glmlaunch.calibrate import profile_import

    profile_import.run_import(log, output=output, base=base, force=force)


@app.command("preflight")
def preflight_cmd(
    profile: ProfileOpt = None,
    set_: SetOpt = None,
    backend: Annotated[
        str | None,
        typer.Option(
            "--backend",
            help="auto (the profile's library when it can run here), sparkinfer, b12x or replay "
            "(default: $GLMLAUNCH_BACKEND or auto)",
        ),
    ] = None,
    device: Annotated[
        str, typer.Option("--device", help="cuda (default) or cpu (gloo, no GPU: a dry run)")
    ] = "cuda",
    timeout: Annotated[
        list[str] | None,
        typer.Option("--timeout", help="per-phase limit: SECONDS (all but build) or PHASE=SECONDS"),
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


# --- calibrate (learn from real vLLM boots; search the knobs) ------------------------------------
calibrate_app = typer.Typer(
    help="Learn W, P, N, G_e and T-F0 from real vLLM boot logs; search the knobs with them.",
    no_args_is_help=True,
)
app.add_typer(calibrate_app, name="calibrate")


@calibrate_app.command("ingest")
def calibrate_ingest_cmd(
    logs: Annotated[list[Path], typer.Argument(help="vLLM boot logs (all ranks' output, as written)")],
    profile: ProfileOpt = None,
    set_: SetOpt = None,
    inventory: InventoryOpt = None,
    probe: Annotated[bool, typer.Option("--probe", help="probe NVML for the GPU identity")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="parse and report; store nothing")] = False,
    json_: JsonOpt = False,
) -> None:
    """Parse boot logs per rank, store a calibration record per boot, print terms and residuals."""
    from glmlaunch.calibrate import commands as calibrate_commands

    calibrate_commands.run_ingest(
        logs, profile, set_ or [], inventory_file=inventory, probe=probe, dry_run=dry_run, as_json=json_
    )


@calibrate_app.command("list")
def calibrate_list_cmd(json_: JsonOpt = False) -> None:
    """List stored calibration records (corrupt or foreign files are skipped with a warning)."""
    from glmlaunch.calibrate import commands as calibrate_commands

    calibrate_commands.run_list(as_json=json_)


@calibrate_app.command("show")
def calibrate_show_cmd(
    record: Annotated[
        str | None, typer.Argument(help="record id or prefix (default: the record the profile matches)")
    ] = None,
    profile: ProfileOpt = None,
    set_: SetOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Show one record, or the record the profile would use and why the others do not match."""
    from glmlaunch.calibrate import commands as calibrate_commands

    calibrate_commands.run_show(record, profile, set_ or [], as_json=json_)


@calibrate_app.command("search")
def calibrate_search_cmd(
    objective: Annotated[
        str,
        typer.Option(
            "--objective",
            help="max-batched-tokens, max-prefill-capacity, max-kv-bytes, max-gmu, "
            "or min-gmu (the lowest GMU vLLM accepts)",
        ),
    ] = "max-batched-tokens",
    profile: ProfileOpt = None,
    set_: SetOpt = None,
    min_margin: Annotated[
        str | None, typer.Option("--min-margin", help="margin each rank keeps (default memory.min_margin)")
    ] = None,
    step: Annotated[int | None, typer.Option("--step", help="batched-token grid step (default 256)")] = None,
    upper: Annotated[str | None, typer.Option("--max", help="upper end of the searched range")] = None,
    inventory: InventoryOpt = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="overlay profile (default ./NAME-OBJECTIVE.yaml)")
    ] = None,
    no_write: Annotated[bool, typer.Option("--no-write", help="search and print; write no overlay")] = False,
    json_: JsonOpt = False,
) -> None:
    """Find the largest knob value that keeps every rank's margin; write a calibrated overlay profile."""
    from glmlaunch.calibrate import commands as calibrate_commands

    calibrate_commands.run_search(
        profile,
        set_ or [],
        objective=objective,
        min_margin=min_margin,
        step=step,
        upper=upper,
        inventory_file=inventory,
        output=output,
        write=not no_write,
        as_json=json_,
        command=" ".join(["glmlaunch", *sys.argv[1:]]),
    )


@app.command("serve")
def serve_cmd(
    profile: ProfileOpt = None,
    set_: SetOpt = None,
    vllm_args: Annotated[
        list[str] | None,
        typer.Argument(
            help="extra `vllm serve` arguments, after --; flags glmlaunch manages are refused",
            metavar="[-- VLLM_ARGS...]",
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
        str | None, typer.Option("--backend", help="preflight backend: auto, sparkinfer, b12x or replay")
    ] = None,
    vllm_bin: Annotated[
        str | None, typer.Option("--vllm-bin", help="vllm executable (default: $GLMLAUNCH_VLLM_BIN, PATH)")
    ] = None,
    inventory: InventoryOpt = None,
) -> None:
    """Resolve, check, plan, preflight, then exec `vllm serve` (the container entrypoint)."""
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
        )
    )
    serve_mod.render(plan, as_json=json_)


# --- plan / audit / diff (the allocation ledger and the memory budget) ---------------------------
GpuMemoryOpt = Annotated[
    str | None,
    typer.Option("--gpu-memory", help="device memory per GPU, e.g. 96GiB (default: the profile's)"),
]
LibraryOpt = Annotated[
    str,
    typer.Option(
        "--library",
        help="where layouts come from: builtin (versioned table; default), b12x (import it, ~4 s), auto",
    ),
]


@app.command("plan")
def plan_cmd(
    profile: ProfileOpt = None,
    set_: SetOpt = None,
    gpu_memory: GpuMemoryOpt = None,
    json_: JsonOpt = False,
    explain: Annotated[
        str | None, typer.Option("--explain", help="show one ledger entry's formula with its values")
    ] = None,
    svg: Annotated[
        Path | None, typer.Option("--svg", help="also write the per-GPU memory map as SVG")
    ] = None,
    library: LibraryOpt = "builtin",
) -> None:
    """Every allocation per GPU rank, the KV budget and the margin verdict (exit 4 when it fails)."""
    from glmlaunch.plan.planner import make_plan
    from glmlaunch.plan.render import render_plan

    result = make_plan(profile, set_ or [], gpu_memory=gpu_memory, library=library)
    render_plan(result, as_json=json_, explain=explain, svg=svg)


@app.command("audit")
def audit_cmd(profile: ProfileOpt = None, set_: SetOpt = None, json_: JsonOpt = False) -> None:
    """What is allocated but unread or mostly unused, with bytes recoverable per rank and the fix."""
    from glmlaunch.plan.audit import run_audit
    from glmlaunch.plan.render import render_audit

    result, found = run_audit(profile, set_ or [])
    render_audit(result, found, as_json=json_)


@app.command("diff")
def diff_cmd(
    a: Annotated[str, typer.Argument(help="left profile")],
    b: Annotated[
        str | None, typer.Argument(help="right profile (default: A again, with --set applied)")
    ] = None,
    set_: SetOpt = None,
    gpu_memory: GpuMemoryOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Two configurations side by side: settings, ledger and budget with deltas."""
    from glmlaunch.plan.diff import run_diff
    from glmlaunch.plan.render import render_diff

    render_diff(run_diff(a, b, set_ or [], gpu_memory=gpu_memory), as_json=json_)


def _fail(exc: GlmlaunchError) -> NoReturn:
    # one_line() already hides the value of a secret-named key; mask_secrets hides every other secret.
    lines = exc.all_lines() if hasattr(exc, "all_lines") else [exc.one_line()]
    for line in lines:
        sys.stderr.write(f"error: {printable(mask_secrets(line))}\n")
    raise SystemExit(int(exc.exit_code))


def main() -> None:
    reset_secrets()  # the secrets of this run only (main may run many times in one process, as in tests)
    try:
        app()
    except GlmlaunchError as exc:
        if debug_enabled():
            raise
        _fail(exc)
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        raise SystemExit(int(ExitCode.INTERRUPTED)) from None
    except BrokenPipeError:
        # `glmlaunch plan --json | head` closes the pipe early; that is not an error. Point stdout at
        # /dev/null so the interpreter's final flush cannot fail again (Python's documented recipe).
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        raise SystemExit(0) from None


if __name__ == "__main__":
    main()
