"""Command-line interface: declarations only; each command calls one plain function and renders.

Exit codes are documented in README.md and defined in ``errors.ExitCode``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from glmlaunch import commands, hwcommands
from glmlaunch.errors import ExitCode, GlmlaunchError
from glmlaunch.output import debug_enabled, err_console, mask_secrets

app = typer.Typer(
    name="glmlaunch",
    help="Resolve, validate, plan, preflight and launch GLM-5.2 on vLLM with the sparkinfer / b12x kernels.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,
)
profiles_app = typer.Typer(help="List, show and describe deployment profiles.", no_args_is_help=True)
app.add_typer(profiles_app, name="profiles")

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
    commands.show_env(profile, set_ or [], shell=shell)


@app.command("args")
def args_cmd(profile: ProfileOpt = None, set_: SetOpt = None, json_: JsonOpt = False) -> None:
    """Print the `vllm serve` argument vector, one argument per line (or JSON)."""
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
    hwcommands.run_check(
        profile, set_ or [], inventory_file=inventory, purpose=purpose, strict=strict, as_json=json_
    )


@profiles_app.command("list")
def profiles_list_cmd(json_: JsonOpt = False) -> None:
    """List profiles with their description and inheritance."""
    commands.list_profiles(as_json=json_)


@profiles_app.command("show")
def profiles_show_cmd(name: Annotated[str, typer.Argument(help="profile name or path")]) -> None:
    """Print a profile file and the chain it extends."""
    commands.show_profile(name)


@profiles_app.command("schema")
def profiles_schema_cmd(
    output: Annotated[Path | None, typer.Option("--output", "-o", help="write to a file instead")] = None,
) -> None:
    """Print the JSON Schema of the profile format (for editors)."""
    commands.profile_schema(output)


def _fail(exc: GlmlaunchError) -> NoReturn:
    lines = exc.all_lines() if hasattr(exc, "all_lines") else [exc.one_line()]
    err_console.print(f"error: {mask_secrets(lines[0])}", markup=False, highlight=False)
    for line in lines[1:]:
        err_console.print(f"error: {mask_secrets(line)}", markup=False, highlight=False)
    raise SystemExit(int(exc.exit_code))


def main() -> None:
    try:
        app()
    except GlmlaunchError as exc:
        if debug_enabled():
            raise
        _fail(exc)
    except KeyboardInterrupt:
        err_console.print("interrupted", markup=False)
        raise SystemExit(int(ExitCode.INTERRUPTED)) from None
    except BrokenPipeError:
        # `glmlaunch plan --json | head` closes the pipe early; that is not an error.
        sys.stderr.close()
        raise SystemExit(0) from None


if __name__ == "__main__":
    main()
