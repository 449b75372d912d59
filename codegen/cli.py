"""`mdlc`: the command line. Exit 0 on success, 1 for errors in the .mdl file, 2 for
usage errors, 3 for internal errors (our bugs)."""
from __future__ import annotations

import argparse
import json
import os
import sys
import traceback

REPORT_URL = "the mdl issue tracker"


def _define(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep or not key.isidentifier():
        raise argparse.ArgumentTypeError(f"expected K=V, got {text!r}")
    for convert in (int, float):
        try:
            return key, convert(value)
        except ValueError:
            pass
    if value in ("true", "false"):
        return key, value == "true"
    raise argparse.ArgumentTypeError(f"-D {key}: {value!r} is not a number, true or false")


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="mdlc", description="The mdl compiler.")
    sub = top.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="parse and check a .mdl file")
    check.add_argument("file")
    check.add_argument("-D", dest="defines", action="append", type=_define, default=[],
                       metavar="K=V", help="override a hyper-parameter")
    check.add_argument("--model", help="the model to check when the file has several")
    check.add_argument("--params", action="store_true", help="print the parameter table")
    check.add_argument("--json", action="store_true", help="print one JSON object")
    check.add_argument("--dtype", choices=("f32", "f64"), default="f32")
    return top


def cmd_check(args) -> int:
    from dsl import check_file, params_table, summary, to_json
    cm = check_file(args.file, defines=dict(args.defines), model=args.model, dtype=args.dtype)
    for w in cm.warnings:
        print(w.render(), file=sys.stderr)
    if args.json:
        print(json.dumps(to_json(cm), indent=2))
        return 0
    print(summary(cm))
    if args.params:
        print()
        print(params_table(cm))
    return 0


COMMANDS = {"check": cmd_check}


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from dsl import MdlError, UsageError
    try:
        return COMMANDS[args.command](args)
    except BrokenPipeError:  # `mdlc check F | head`: the reader left; leave quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except MdlError as exc:
        print(exc.render(), file=sys.stderr)
        return 1
    except UsageError as exc:
        print(f"mdlc: error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # a bug of ours: say so, never a raw traceback by default
        print(f"mdlc: internal error: {type(exc).__name__}: {exc}\n"
              f"This is a bug in mdlc; please report it to {REPORT_URL} with the input file"
              " (set MDL_DEBUG=1 for the traceback).", file=sys.stderr)
        if os.environ.get("MDL_DEBUG"):
            traceback.print_exc()
        return 3


if __name__ == "__main__":
    sys.exit(main())
