"""A simulated crowd plays the provisioned participants (demo and tests)."""

from __future__ import annotations

from prefect import flow

from tasks.study1 import simulate_study1_crowd


@flow(name="simulate-crowd", log_prints=True)
def simulate_crowd(study: str = "studies/demo.yaml", dropouts: list[str] | None = None) -> int:
    """Simulated participants log in to Argilla and answer what is pending in their datasets,
    through the annotator API a browser uses; some drop out, some answer carelessly or rudely
    (as configured in the study's `crowd` section). Returns the number of answers submitted."""
    report = simulate_study1_crowd(study, dropouts)
    print(f"{report.participants_played} participants played, {report.answers_submitted} answers, "
          f"{len(report.dropouts)} drop-outs, kinds {report.kinds}")
    return report.answers_submitted
