import importlib

import pytest

from bench.__main__ import SUBCOMMANDS, build_parser, main


def test_every_subcommand_module_registers_itself():
    parser = build_parser()
    for name in SUBCOMMANDS:
        module = importlib.import_module(name)
        assert callable(module.add_parser)
        assert callable(module.run)
    args = parser.parse_args(["load", "--url", "http://127.0.0.1:1", "--model", "m", "--out", "o"])
    assert args.run is importlib.import_module("bench.load").run


def test_a_subcommand_is_required(capsys):
    with pytest.raises(SystemExit) as exc:
        main([])
    assert exc.value.code == 2
    assert "load" in capsys.readouterr().err
