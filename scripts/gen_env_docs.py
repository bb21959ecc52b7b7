"""Write docs/environment.md from glmlaunch/config/registry.py (run after changing the registry)."""

from __future__ import annotations

from pathlib import Path

from glmlaunch.config.registry import reference_markdown

if __name__ == "__main__":
    target = Path(__file__).resolve().parent.parent / "docs" / "environment.md"
    target.write_text(reference_markdown(), encoding="utf-8")
    print(f"wrote {target}")
