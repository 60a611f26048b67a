"""Commands that run flows: ``smoke``, ``run`` (one stage flow), ``demo`` (the whole study with the
simulated crowd, optionally compared without onboarding) and ``simulate``."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from crowdpref.cli.common import (_quiet_explained_tracebacks, _require_argilla, _settings, _use_prefect, app, console,
                                  explain, friendly_errors, trust_stack_ca)
from crowdpref.errors import CrowdprefError
from crowdpref.project import use_project
from crowdpref.settings import Settings


@app.command()
@friendly_errors
def smoke() -> None:
    """Run the smoke-check flow against the configured Argilla and Prefect.

    `make demo` uses it until the study flow exists."""
    settings = _settings()
    _use_prefect(settings)
    _require_argilla(settings)
    use_project()
    from flows.smoke import smoke_check

    _call_flow(smoke_check, settings, "smoke")
    console.print(f"Prefect UI (flow runs): {settings.prefect_ui_url}/runs", highlight=False)


FLOWS = {
    "study": ("flows.study", "study"),
    "generate-questions": ("flows.generate_questions", "generate_questions"),
    "collect-responses": ("flows.collect_responses", "collect_responses"),
    "collect-ratings": ("flows.collect_ratings", "collect_ratings"),
    "simulate-crowd": ("flows.simulate_crowd", "simulate_crowd"),
    "screen-responses": ("flows.screen_responses", "screen_responses"),
    "aggregate-ratings": ("flows.aggregate_ratings", "aggregate_ratings"),
    "evaluate": ("flows.evaluate", "evaluate"),
    "publish-dataset": ("flows.publish_dataset", "publish_dataset"),
    "recruit": ("flows.recruit", "recruit"),
    "sync-prolific": ("flows.sync_prolific", "sync_prolific"),
}


@app.command("run")
@friendly_errors
def run_flow(
    flow_name: str = typer.Argument(..., help=f"One of: {', '.join(FLOWS)}."),
    study: Path = typer.Argument(..., help="The study config, e.g. studies/demo.yaml."),
    skip_preflight: bool = typer.Option(False, "--skip-preflight", help="study, recruit: publish on the real "
                                        "Prolific without a passed pre-flight; who skipped it is recorded in the "
                                        "study's events."),
    skipped_by: str = typer.Option("", "--skipped-by", help="With --skip-preflight: who skips it (default: the "
                                   "OS user)."),
) -> None:
    """Run one stage flow now, recorded by the configured Prefect server."""
    import importlib

    from crowdpref.config import load_study

    if flow_name not in FLOWS:
        raise typer.BadParameter(f"unknown flow '{flow_name}': choose one of {', '.join(FLOWS)}")
    extra: dict[str, Any] = {}
    if skip_preflight:
        if flow_name not in ("study", "recruit"):
            raise typer.BadParameter(f"--skip-preflight: only the study and recruit flows publish on Prolific, "
                                     f"not {flow_name}")
        from crowdpref.preflight.gate import Skip

        extra = {"skip_preflight": True, "skipped_by": Skip.of(skipped_by).by}
    config = load_study(study)  # one-line error before Prefect starts
    settings = _settings()
    _use_prefect(settings)
    if _needs_argilla(flow_name, config, settings):
        _require_argilla(settings)
    module, attribute = FLOWS[flow_name]
    use_project()
    result, run_url = _call_flow(getattr(importlib.import_module(module), attribute), settings, flow_name,
                                 study=str(study), **extra)
    console.print(result_view(flow_name, result))
    console.print(f"Prefect UI, this run: {run_url}", highlight=False, soft_wrap=True)


def result_view(flow_name: str, result: Any) -> Table | str:
    """What `crowdpref run` prints for a flow's result, never a Python repr: the study flow's
    stages as a table (as `demo` prints them), another flow's fields (a mapping or a dataclass)
    as a table of field and value, a written file or a flow's own sentence as one line."""
    if isinstance(result, dict) and isinstance(result.get("stages"), list):
        return stage_table(f"{result.get('study', flow_name)}: {result.get('status', '?')}", result["stages"])
    if dataclasses.is_dataclass(result) and not isinstance(result, type):
        result = {field.name: getattr(result, field.name) for field in dataclasses.fields(result)}
    if isinstance(result, dict):
        table = Table(title=flow_name)
        table.add_column("field")
        table.add_column("value")
        for name, value in result.items():
            shown = ", ".join(f"{k} {v}" for k, v in value.items()) if isinstance(value, dict) else str(value)
            table.add_row(str(name), shown)
        return table
    if isinstance(result, Path):
        return f"{flow_name}: done, wrote {result}"
    return f"{flow_name}: done" if result is None else f"{flow_name}: {result}"


def stage_table(title: str, stages: list[dict[str, Any]]) -> Table:
    """The study flow's stages: name, status and seconds, one row each."""
    table = Table(title=title)
    for column in ("stage", "status", "seconds"):
        table.add_column(column)
    for stage in stages:
        table.add_row(stage["stage"], stage["status"], f"{stage['seconds']:.1f}")
    return table


ARGILLA_FLOWS = {"study": "ratings.parquet", "collect-responses": "responses.parquet",
                 "collect-ratings": "ratings.parquet", "simulate-crowd": None, "recruit": None, "sync-prolific": None}
"""Flows that talk to Argilla, and the output after which they no longer need it (None: always)."""


def _needs_argilla(flow_name: str, config: Any, settings: Settings) -> bool:
    if flow_name not in ARGILLA_FLOWS:
        return False
    done = ARGILLA_FLOWS[flow_name]
    return done is None or not (settings.runs_dir / config.name / done).exists()


def _call_flow(flow: Any, settings: Settings, name: str, **parameters: Any) -> tuple[Any, str]:
    """Run a flow; return its result and the link to its run. When it fails for a reason :func:`explain` can put in
    one line, raise that line with the run's link (the run's log in the UI keeps the
    traceback; the console shows none); any other failure re-raises its exception."""
    _quiet_explained_tracebacks()
    state = flow(**parameters, return_state=True)
    result = state.result(raise_on_failure=False)
    run_url = f"{settings.prefect_ui_url}/runs/flow-run/{state.state_details.flow_run_id}"
    if state.is_completed():
        return result, run_url
    if isinstance(result, BaseException):
        explained = explain(result)
        if explained is None:
            raise result  # a bug: its traceback
        failed = CrowdprefError(f"{name} failed: {explained} (run: {run_url})")
        failed.exit_code = explained.exit_code
        raise failed
    raise CrowdprefError(f"the {name} flow ended {state.name}: {state.message} (run: {run_url})")


@app.command()
@friendly_errors
def demo(
    study: Path = typer.Argument(Path("studies/demo.yaml"), help="The study config to run."),
    max_wait_s: float = typer.Option(120.0, help="How long to wait for quiet participants to be released."),
    compare_onboarding: bool = typer.Option(
        False, "--compare-onboarding", help="Then run the same study with the same crowd and no onboarding "
        "(as NAME-no-onboarding) and print both runs' onboarding and check figures side by side."),
) -> None:
    """Run the whole study with the simulated crowd and print where to look.

    Uses the running services (`crowdpref up`); stages already done are skipped."""
    import time

    from crowdpref.config import load_study
    from crowdpref.runfolder import RunFolder

    config = load_study(study)
    settings = _settings()
    _use_prefect(settings)
    _require_argilla(settings)
    use_project()
    from flows.study import study as study_flow

    started = time.perf_counter()
    trust_stack_ca(settings)  # the public profile with Caddy's own CA: the simulated crowd trusts it
    if config.crowd.arrive_via == "prolific":
        _start_fake_prolific(config, settings)
    result, run_url = _call_flow(study_flow, settings, "study", study=str(study), simulate=True, max_wait_s=max_wait_s)
    if not isinstance(result, dict):
        raise CrowdprefError(f"the study flow returned {type(result).__name__}, not its stage table (run: {run_url})")
    console.print(stage_table(f"{config.name}: {result['status']} in {time.perf_counter() - started:.0f} s",
                              result["stages"]))
    run = RunFolder.for_study(settings.runs_dir, config.name)
    console.print(f"Prefect UI, this run:   {run_url}", highlight=False, soft_wrap=True)
    from crowdpref.store import open_store

    _print_onboarding(config, settings)
    store = open_store(settings)
    study1 = store.find_collection(config.name, "study1")
    participants = store.participants(study1.id) if study1 is not None else []
    if participants:
        who = (f"the owner (credentials in {settings.owner_credentials_file})" if settings.embedded_argilla
               else "an owner or admin")
        console.print(
            f"Argilla UI:             {settings.argilla_api_url}  - log in as {who} to see every participant's "
            f"dataset, e.g. [bold]{participants[0].username}[/]'s; their own access ended when they finished",
            highlight=False,
            soft_wrap=True,
        )
    store.close()
    evaluation = run.file("evaluation.json")
    if evaluation.exists():
        import json

        verdict = json.loads(evaluation.read_text(encoding="utf-8")).get("verdict", "?")
        console.print(f"Does the data carry signal? {verdict}  ({evaluation})", highlight=False, soft_wrap=True)
    release = run.file("release")
    if release.exists():
        console.print(f"Published dataset:      {release}  (load it with datasets.load_dataset('{release}'))",
                      highlight=False, soft_wrap=True)
    if compare_onboarding:
        plain = without_onboarding(study, settings)
        _call_flow(study_flow, settings, "study", study=str(plain), simulate=True, max_wait_s=max_wait_s)
        console.print(onboarding_comparison(config, load_study(plain), settings))


def without_onboarding(study: Path, settings: Settings) -> Path:
    """A copy of the config ``study`` named ``<name>-no-onboarding``, with no onboarding in either
    study and everything else - the seed, the crowd, the checks - as it is: the same simulated
    people, with nothing before the work. Written to ``<state>/studies/``; returns its path."""
    import yaml

    from crowdpref.runfolder import write_text

    data = yaml.safe_load(Path(study).read_text(encoding="utf-8"))
    data["name"] = f"{data['name']}-no-onboarding"
    for key in ("study1", "study2"):
        if isinstance(data.get(key), dict):
            data[key].pop("onboarding", None)
    path = settings.state_dir / "studies" / f"{data['name']}.yaml"
    write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), path)
    return path


def onboarding_comparison(with_config: Any, without_config: Any, settings: Settings) -> Table:
    """Both runs of ``demo --compare-onboarding`` per study: who the onboarding held out of the
    work, and how much work the checks later excluded (and others redid)."""
    from crowdpref.progress import study_progress

    table = Table(title="the same crowd with and without onboarding")
    for column in ("study", "run", "people who claimed work", "screened out before the work",
                   "participants the checks excluded", "work the checks excluded (redone)"):
        table.add_column(column)
    runs = [("with onboarding", study_progress(with_config, settings)),
            ("without", study_progress(without_config, settings))]
    for key in ("study1", "study2"):
        for label, progress in runs:
            part = next(p for p in progress.parts if p.key == key)
            claimed = sum(part.participants.values())
            screened = part.onboarding.screened_out if part.onboarding else 0
            checks = part.checks
            table.add_row(key, label, str(claimed), str(screened),
                          str(checks.excluded_participants) if checks else "-", f"{part.excluded} {part.unit}")
    return table


def _print_onboarding(config: Any, settings: Settings) -> None:
    """The demo's onboarding figures per study: who the quiz screened out (held out of the
    work, each of whom would otherwise have claimed a batch) and whose work the checks later
    excluded and gave to others (redone)."""
    from crowdpref.progress import study_progress

    for part in study_progress(config, settings).parts:
        section = config.study1 if part.key == "study1" else config.study2
        per = section.questions_per_participant if part.key == "study1" else section.pairs_per_participant
        redone = f"the checks later excluded {part.excluded} {part.unit} (redone by others)"
        if part.onboarding is None:
            console.print(f"{part.key}: no onboarding; {redone}", highlight=False)
            continue
        o = part.onboarding
        console.print(f"{part.key} onboarding: {o.describe()}; held out of the work: {o.screened_out} people "
                      f"(up to {o.screened_out * per} {part.item}s they would otherwise have claimed); {redone}",
                      highlight=False)


@app.command()
@friendly_errors
def simulate(study: Path = typer.Argument(..., help="The study config, e.g. studies/demo.yaml.")) -> None:
    """Let the simulated crowd answer what is pending (the simulate-crowd flow)."""
    run_flow("simulate-crowd", study, skip_preflight=False, skipped_by="")  # (called directly: no typer defaults)


def _start_fake_prolific(config: Any, settings: Settings) -> None:
    """The demo's participants come through the FAKE Prolific and the portal: start the fake,
    check the portal runs, and subscribe the portal to the fake's webhooks (a fresh fake knows no
    subscription, so this is done on every demo run)."""
    from crowdpref.errors import ServiceError
    from crowdpref.recruitment import prolific_client, setup_webhooks
    from crowdpref.store import open_store

    use_project()
    from services import portal, stack

    if not portal.healthy(settings):
        raise ServiceError(f"the participant portal is not running at {settings.portal_public_url}: run `crowdpref up`")
    with console.status("starting the fake Prolific..."):
        stack.start_fake_prolific(settings)
    store = open_store(settings)
    try:
        with prolific_client(config, settings) as client:
            setup_webhooks(settings, store, client, workspace_id="demo-workspace", force=True)
    finally:
        store.close()
    console.print(f"Fake Prolific:          http://{settings.host}:{settings.fake_prolific_port}  "
                  "(simulated participants arrive through it and the portal)", highlight=False)
