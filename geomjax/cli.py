"""The ``geomjax`` command: demo, geometry, verify, train, report.

Every command writes a run directory: ``config.json`` (resolved), ``metrics.json``,
``figures/*.png``, ``report.md``, ``report.html`` (and ``report.json`` to re-render).

User errors (:class:`geomjax.errors.GeomjaxError`: bad paths, sizes, names, unsupported
configurations, corrupted files) print one line, ``geomjax: error: <message>``, and exit with
status 2; ``--debug`` or ``GEOMJAX_DEBUG=1`` adds the traceback. Any other exception is a bug and
keeps its traceback (exit 1).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import traceback
from pathlib import Path

from geomjax.base import threads
from geomjax.errors import GeomjaxError

__all__ = ["main", "build_parser"]


def _add_config_option(group: argparse._ArgumentGroup, field: dataclasses.Field, opt) -> None:
    """One option of a GeometryConfig field, as its ``CliOption`` declares it (dest = the field name)."""
    flags = [opt.flag or "--" + field.name.replace("_", "-")] + ([opt.short] if opt.short else [])
    kw: dict = {"dest": field.name, "help": opt.help}
    if opt.negate or field.default is False:
        kw.update(action="store_true")
    elif field.type == "bool | None":
        kw.update(action=argparse.BooleanOptionalAction, default=None)
    else:
        kw.update(type=int if field.type.startswith("int") else str, choices=opt.choices,
                  default=None if opt.preset else field.default)
    group.add_argument(*flags, **kw)


def _add_geometry_args(p: argparse.ArgumentParser, defaults) -> None:
    """The options of ``geometry`` / ``demo``: one per GeometryConfig field that declares a CliOption
    (geomjax.analysis.study_config), then --preset and the execution/multi-host options."""
    from geomjax.analysis.study_config import GeometryConfig, cli_option

    groups = {name: p.add_argument_group(name) for name in ("model and data", "conventions", "execution")}
    for field in dataclasses.fields(GeometryConfig):
        if (opt := cli_option(field)) is not None:
            _add_config_option(groups[opt.group], field, opt)
    groups["model and data"].add_argument(
        "--preset", choices=["cpu", "paper"], default="cpu",
        help="sampling sizes: cpu (default: C = %d x %d, T = %d; minutes here) or paper (C = 6400, T = 512, "
             "as Song & Zhong; meant for a GPU and a large corpus); explicit size flags override the preset"
             % (defaults.n_docs, defaults.windows_per_doc, defaults.seq_len))
    x = groups["execution"]
    x.add_argument("--dry-run", action="store_true",
                   help="print the per-device memory and FLOPs of the study's step (XLA's analysis of the "
                        "compiled program, from shapes: no weights read) and exit; refuses a configuration "
                        "that does not fit the device")
    x.add_argument("--device-memory", type=float, default=None, metavar="GB",
                   help="memory of one device for --dry-run (default: what the device reports; a CPU reports none)")
    x.add_argument("--out", default=None, help="run directory (default runs/<command>-<time>)")
    x.add_argument("--overwrite", action="store_true",
                   help="replace whatever --out holds (otherwise a foreign or different run is refused)")
    x.add_argument("--no-progress", action="store_true")
    m = p.add_argument_group("multi-host (one launch per process; see docs/accelerators.md)")
    m.add_argument("--distributed", action="store_true",
                   help="call jax.distributed.initialize() (cluster auto-detection: SLURM, MPI, TPU) "
                        "and shard the windows over the devices of every process")
    m.add_argument("--coordinator", default=None, help="host:port of process 0 (with the two below)")
    m.add_argument("--num-processes", type=int, default=None)
    m.add_argument("--process-id", type=int, default=None)


def build_parser() -> argparse.ArgumentParser:
    from geomjax.analysis.study_config import GeometryConfig

    d = GeometryConfig()
    parser = argparse.ArgumentParser(
        prog="geomjax",
        description="Geometry of transformer hidden states and statistics of attention (JAX).",
    )
    parser.add_argument("--debug", action="store_true",
                        help="show the traceback of user errors too (or set GEOMJAX_DEBUG=1)")
    common = argparse.ArgumentParser(add_help=False)  # --debug also after the command name
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show the traceback of user errors too (or set GEOMJAX_DEBUG=1)")
    sub = parser.add_subparsers(dest="command", required=True)
    p_demo = sub.add_parser(
        "demo", parents=[common],
        help="the main job: a real pretrained model (MiniLM) on real text, full report")
    _add_geometry_args(p_demo, d)
    p_demo.add_argument("--claims", nargs="?", const="quick", default=None, choices=["quick", "full"],
                        metavar="BUDGET",
                        help="also check the claims of the paper the study reproduces (the source that declares DEMO) in "
                             "this run, at Monte Carlo budget quick (the default) or full; without it the report "
                             "lists their recorded full verdicts")
    p_geo = sub.add_parser(
        "geometry", parents=[common],
        help="per-layer position/context decomposition study (Song & Zhong)")
    _add_geometry_args(p_geo, d)
    p_ver = sub.add_parser(
        "verify", parents=[common], help="check the sources' quantitative claims")
    p_ver.add_argument("--source", default=None,
                       help="claim selection: a source (a folder of geomjax/sources/; `verify --list` lists their claims) "
                            "or an id glob")
    p_ver.add_argument("--claims", dest="claims_file", default=None, metavar="FILE_OR_MODULE",
                       help="check your own claims instead: a Python file (my_claims.py) or an importable module "
                            "that registers them with geomjax.claims.register (docs/your_paper.md); --source then "
                            "selects among them, and the full verdicts geomjax records are not touched")
    p_ver.add_argument("--budget", choices=["quick", "full"], default="quick")
    p_ver.add_argument("--seed", type=int, default=0)
    p_ver.add_argument("--time-budget", type=float, default=None, metavar="SECONDS",
                       help="wall seconds for the selected claims: cheapest to decide first, Monte Carlo rounds "
                            "stop at the deadline, claims not reached are inconclusive")
    p_ver.add_argument("--workers", type=int, default=None, metavar="N",
                       help="processes that check the claims (default: the usable CPUs, at most 2); each source "
                            "module's deterministic claims stay in one process, and the verdicts are the same for "
                            "any N")
    p_ver.add_argument("--out", default=None)
    p_ver.add_argument("--overwrite", action="store_true", help="replace whatever --out holds")
    p_ver.add_argument("--no-progress", action="store_true")
    p_ver.add_argument("--list", action="store_true",
                       help="print the selected claims (id, kind, rule, recorded seconds, cost, source) and exit "
                            "without checking anything")
    p_ver.add_argument("--recorded", action="store_true",
                       help="with --erratum PATH: write the erratum from the recorded full verdicts "
                            "(geomjax/claims/full_verdicts.json) and exit, without checking anything")
    p_ver.add_argument("--erratum", nargs="?", const="", default=None, metavar="PATH",
                       help="also write the erratum (statements that do not hold, with both witnesses) to PATH "
                            "(default: ERRATA.md in the run directory); with --budget full the recorded full "
                            "verdicts (geomjax/claims/full_verdicts.json) are updated too")
    p_tr = sub.add_parser(
        "train", parents=[common], help="train a toy transformer preset (resumes from checkpoints)")
    p_tr.add_argument("task", choices=["shakespeare", "addition", "modular"])
    p_tr.add_argument("--preset", choices=["smoke", "cpu", "blog", "paper"], default="cpu",
                      help="smoke: a few steps; cpu: minutes on this CPU; paper: the source's "
                           "configuration (meant for a GPU); blog: modular only, the clock blog's "
                           "20,000-epoch run")
    p_tr.add_argument("--data-dir", default=None)
    p_tr.add_argument("--fresh", action="store_true", help="ignore existing checkpoints in --out")
    p_tr.add_argument("--devices", type=int, default=None)
    p_tr.add_argument("--out", default=None,
                      help="run directory; a re-run with the same task and preset resumes there")
    p_tr.add_argument("--overwrite", action="store_true",
                      help="replace whatever --out holds (e.g. a run of another preset)")
    p_tr.add_argument("--no-progress", action="store_true")
    p_rep = sub.add_parser(
        "report", parents=[common], help="re-render report.md / report.html of a run directory")
    p_rep.add_argument("run_dir")
    return parser


def _record_full(results) -> None:
    """``verify --budget full``: record the verdicts as soon as the claims are checked (before the report)."""
    from geomjax.claims import registry  # command dispatch: imported on use (keeps `geomjax --help` fast)

    print(f"full verdicts recorded in {registry.record_full_verdicts(results)}")


def _erratum(args, run, metrics) -> None:
    """``verify --erratum``: write the erratum; at ``--budget full`` it covers every recorded full result
    (recorded by :func:`_record_full`), so per-source full runs accumulate."""
    from geomjax.claims import registry  # command dispatch: imported on use (keeps `geomjax --help` fast)

    results = [registry.ClaimResult.from_dict(d) for d in metrics["results"]]
    records = registry.results_as_records(results)
    if args.budget == "full" and args.claims_file is None:  # per-source full runs accumulate: every recorded claim
        records = registry.load_full_verdicts()
    if args.erratum is not None:
        path = Path(args.erratum) if args.erratum else run.path / "ERRATA.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(registry.to_erratum(records, budget=args.budget, claims_file=args.claims_file))
        print(f"erratum: {path if args.erratum else 'ERRATA.md in the run directory'}")


def _config_from_args(args) -> "GeometryConfig":  # noqa: F821
    """The GeometryConfig of parsed ``geometry`` / ``demo`` options: the preset's sizes, then every
    field's option (as its CliOption declares: negated flags, a word for None)."""
    from geomjax.analysis.study_config import PRESETS, GeometryConfig, cli_option

    values = dict(PRESETS[args.preset])
    for field in dataclasses.fields(GeometryConfig):
        opt = cli_option(field)
        if opt is None:
            continue
        v = getattr(args, field.name)
        if opt.negate:
            v = not v
        elif opt.preset and v is None:
            continue
        elif opt.none_word is not None and str(v).lower() in (opt.none_word, ""):
            v = None
        values[field.name] = v
    return GeometryConfig(**values)


def _sweep(args, cfg) -> list[str]:
    """The checkpoints of ``--model`` (several, comma-separated, make a sweep; ``geometry`` only)."""
    from geomjax.analysis.study_config import sweep_models

    models = sweep_models(cfg.model)
    if len(models) > 1 and args.command != "geometry":
        raise GeomjaxError(f"--model lists {len(models)} checkpoints; a sweep runs with `geomjax geometry`")
    if not models:
        raise GeomjaxError("--model is empty")
    return models


def _debug_requested(argv: list[str] | None) -> bool:
    argv = sys.argv[1:] if argv is None else argv
    return "--debug" in argv or os.environ.get("GEOMJAX_DEBUG", "").strip() not in ("", "0")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``geomjax`` command: runs it, turning user errors into one line.

    Returns:
      0 on success, 2 for a :class:`GeomjaxError` (message on stderr as
      ``geomjax: error: <message>``, traceback only with ``--debug`` / ``GEOMJAX_DEBUG=1``).
      Other exceptions propagate (traceback, exit status 1).
    """
    try:
        with threads.host_blas_threads():
            return _run(build_parser().parse_args(argv))
    except GeomjaxError as e:
        if _debug_requested(argv):
            traceback.print_exc()
        msg = " ".join(str(e).split()) or type(e).__name__
        print(f"geomjax: error: {msg}", file=sys.stderr)
        return 2


def _run(args) -> int:
    """Run the parsed command."""
    primary = True
    if getattr(args, "distributed", False) or any(
            getattr(args, a, None) is not None for a in ("coordinator", "num_processes", "process_id")):
        import jax

        from geomjax.base import parallel

        pid, n_proc = parallel.initialize(args.coordinator, args.num_processes, args.process_id)
        if args.devices not in (None, jax.device_count()):
            raise GeomjaxError(f"--devices {args.devices} with --distributed: the mesh spans all "
                             f"{jax.device_count()} devices of the {n_proc} processes")
        args.devices = jax.device_count()
        primary = pid == 0
    elif getattr(args, "devices", None) and "xla_force_host_platform_device_count" not in os.environ.get(
            "XLA_FLAGS", ""):
        import jax

        try:  # CPU host devices (ignored by accelerators); before anything initializes a backend
            jax.config.update("jax_num_cpu_devices", int(args.devices))
        except RuntimeError:  # a backend is up already: the mesh check says what is visible
            pass
    from geomjax.base import parallel, timing
    from geomjax.analysis import report

    parallel.enable_compilation_cache()
    if args.command == "report":
        out = report.render_run(args.run_dir)
        print(f"report: {out}")
        return 0
    if args.command == "verify" and args.recorded:
        from geomjax.claims import registry  # command dispatch: imported on use (keeps `geomjax --help` fast)

        if args.claims_file is not None:
            raise GeomjaxError("verify --recorded reads geomjax's recorded verdicts; your --claims are not recorded: "
                               "run them (geomjax verify --claims FILE --erratum PATH)")
        if not args.erratum:
            raise GeomjaxError("verify --recorded writes the erratum of the recorded full verdicts: give --erratum PATH")
        text = registry.to_erratum(registry.load_full_verdicts(), budget="full")
        Path(args.erratum).parent.mkdir(parents=True, exist_ok=True)
        Path(args.erratum).write_text(text)
        print(f"erratum: {args.erratum} (from {registry.FULL_VERDICTS.name})")
        return 0
    if args.command == "verify" and args.list:
        from geomjax.claims import registry  # command dispatch: imported on use (keeps `geomjax --help` fast)

        select = registry.claims_selection(args.source, args.claims_file)
        print(registry.format_table(registry.table(select)), end="")
        return 0
    from geomjax.drivers import pipeline

    # Validate everything that can be validated before loading a model or creating --out.
    if args.command in ("demo", "geometry"):
        cfg = _config_from_args(args)
        models = _sweep(args, cfg)
        for name in models:
            pipeline.validate_geometry(dataclasses.replace(cfg, model=name))
        if args.dry_run:  # the plan of the checkpoint (of a sweep: its first)
            from geomjax.analysis import study  # command dispatch: imported on use

            print("\n".join(study.plan(dataclasses.replace(cfg, model=models[0]), args.device_memory).lines()))
            return 0
        options = dataclasses.asdict(cfg) | ({"claims": args.claims} if args.command == "demo" else {})
    elif args.command == "train":
        pipeline.validate_training(args.task, args.preset, args.data_dir)
        options = {"task": args.task, "preset": args.preset, "data_dir": args.data_dir}
    else:
        args.select = pipeline.claims.claims_selection(args.source, args.claims_file)
        if args.time_budget is not None and not args.time_budget > 0:
            raise GeomjaxError(f"--time-budget must be a positive number of seconds, got {args.time_budget:g}")
        if args.workers is not None and args.workers < 1:
            raise GeomjaxError(f"--workers must be a positive number of processes, got {args.workers}")
        options = {"source": args.source, "claims": args.claims_file, "budget": args.budget, "seed": args.seed}
    progress = not getattr(args, "no_progress", False)
    if not primary:  # every process computes; only process 0 writes the run directory
        import tempfile

        scratch = tempfile.TemporaryDirectory(prefix="geomjax-worker-")
        args.out = scratch.name
    run = report.RunDir(args.out, command=args.command, options=options, overwrite=args.overwrite,
                        in_place=args.command == "train", argv=list(sys.argv[1:]))
    try:
        with timing.record() as rec:
            summary = _execute(args, run, progress)
        final = run.finish(timing=rec.to_json())
    except BaseException:
        run.abandon()
        raise
    if primary:
        if summary:
            print(summary)
        print(f"run directory: {final}\nreport: {final / 'report.html'}")
        caution = pipeline.study.screenot_k_caution(cfg.screenot_k) if args.command in ("demo", "geometry") else None
        if caution:  # also in the report; said after a finished run, so that a refused one stays one error line
            print(f"geomjax: {caution[0].lower()}{caution[1:]}", file=sys.stderr)
    return 0


def _execute(args, run, progress: bool) -> str | None:
    """Write the run's files into ``run``; returns the claims summary line, if any."""
    from geomjax.base import timing
    from geomjax.analysis import report
    from geomjax.claims import registration
    from geomjax.drivers import pipeline

    if args.command in ("demo", "geometry"):
        cfg = _config_from_args(args)
        models = _sweep(args, cfg)
        if len(models) > 1:
            sections, metrics = pipeline.run_geometry_sweep(cfg, models, run, progress=progress)
            run.write_config(dataclasses.asdict(cfg) | {"command": args.command, "sweep": models,
                                                         "model_conventions": metrics["model_conventions"]})
            run.write_json("metrics.json", metrics)
            run.write_report(f"geomjax {args.command}: {len(models)} checkpoints on {cfg.corpus}", sections)
            return None

        demo = registration.demo_source() if args.command == "demo" else None

        def claims_check():  # demo --claims: the claims run while the study's figures are drawn
            pipeline.status_line(f"checking {registration.source_short(demo)}'s claims", progress)
            with timing.stage("claims"):
                s_claims, m_claims = pipeline.run_claims(run, select=demo, budget=args.claims,
                                                         seed=cfg.seed, progress=progress)
            return s_claims, {"claims": m_claims}

        checking = args.command == "demo" and args.claims is not None
        sections, metrics = pipeline.run_geometry(cfg, run, progress=progress,
                                                  alongside=claims_check if checking else None)
        summary = None
        if checking:
            m_claims = metrics["claims"]
            summary = (f"claims: {len(m_claims['results'])} checked: "
                       f"{pipeline.tally_summary(m_claims['tally'])} (see claims.md)")
        elif args.command == "demo":  # the recorded verdicts, and the flag that checks them
            s_claims, m_claims = pipeline.recorded_claims(demo, "geomjax demo --claims")
            sections, metrics = sections + s_claims, metrics | m_claims
            summary = (f"claims: not checked (--claims checks them); recorded full verdicts of "
                       f"{registration.source_short(demo)}'s "
                       f"{len(m_claims['claims']['recorded'])}: {pipeline.tally_summary(m_claims['claims']['recorded_tally'])}")
        with timing.stage("report"):
            run.write_config(dataclasses.asdict(cfg) | {"command": args.command,
                                                         "model_conventions": metrics["model_conventions"]})
            run.write_json("metrics.json", metrics)
            run.write_report(f"geomjax {args.command}: {cfg.model} on {cfg.corpus}",
                             sections + [report.timing_section(timing.current())],
                             meta=pipeline.meta_line(cfg, metrics.get("n_positions")))
        return summary
    if args.command == "train":
        sections, metrics, cfg = pipeline.run_training(
            args.task, args.preset, run, resume=not args.fresh, data_dir=args.data_dir,
            devices=args.devices, progress=progress)
        run.write_json("metrics.json", metrics)
        run.write_report(f"geomjax train: {args.task} ({args.preset})", sections)
        return None
    recording = args.budget == "full" and args.claims_file is None  # a researcher's claims are not geomjax's records
    sections, metrics = pipeline.run_claims(run, select=args.select, budget=args.budget,
                                            seed=args.seed, progress=progress, time_budget=args.time_budget,
                                            on_results=_record_full if recording else None,
                                            workers=args.workers)
    run.write_config({"command": "verify", "source": args.source, "claims": args.claims_file, "budget": args.budget,
                      "seed": args.seed})
    run.write_json("metrics.json", metrics)
    run.write_report("geomjax verify", sections)
    if args.erratum is not None:
        _erratum(args, run, metrics)
    return (f"claims: {len(metrics['results'])} checked: {pipeline.tally_summary(metrics['tally'])} "
            "(see claims.md)")


if __name__ == "__main__":
    sys.exit(main())
