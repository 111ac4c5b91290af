"""`kbflow config show`: every setting in effect and where it came from: a flag, a KBFLOW_*
variable, the settings file (./kbflow.toml, or --config / KBFLOW_CONFIG), or the default."""

from __future__ import annotations

import argparse
import json
from typing import Any

from kbflow.flows.cli.options import add_store_flags, flag_overrides


def add_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "config",
        help="show the settings in effect and where each came from",
        description="Settings come from, lowest to highest: defaults, the settings file (kbflow.toml "
        "in the working directory, or --config FILE / KBFLOW_CONFIG; top-level keys are the setting "
        'names, e.g. default_scope = "team-a"), KBFLOW_* environment variables, flags.',
    )
    actions = p.add_subparsers(dest="config_action", required=True, metavar="ACTION", help="what to do: show")
    show = actions.add_parser(
        "show",
        help="every setting: its value and its source (flag, env KBFLOW_X, file, default)",
        description="Print every setting in effect and where it came from; secrets are masked.",
    )
    add_store_flags(show)
    show.set_defaults(func=show_settings)


def settings_in_effect(args: argparse.Namespace, settings: Any) -> dict[str, Any]:
    """{"file": the settings file read or None, "settings": {name: {"value", "source"}}}."""
    from kbflow.core.home import FOUND_ABOVE
    from kbflow.core.settings import config_file, public_value, setting_origins

    flags = {field: f"flag {flag}" for field, (_, flag) in flag_overrides(args).items()}
    origins = setting_origins(flags)
    out: dict[str, Any] = {}
    for name, field in type(settings).model_fields.items():
        value = getattr(settings, name)
        source = origins[name]
        if source == "default" and value != field.get_default(call_default_factory=True):
            source = FOUND_ABOVE if name == "home" else "derived from the other settings"
        out[name] = {"value": public_value(name, value), "source": source}
    path = config_file()
    return {"file": str(path) if path else None, "settings": out}


def show_settings(args: argparse.Namespace, settings: Any) -> int:
    data = settings_in_effect(args, settings)
    if args.json:
        print(json.dumps(data, ensure_ascii=False))
        return 0
    from kbflow.flows.cli.views import config_lines

    rows = [{"name": k, **v} for k, v in data["settings"].items()]
    for line in config_lines(rows, data["file"]):
        print(line)
    return 0
