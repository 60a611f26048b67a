"""crowdpref: the library. Plain typed Python with no Prefect imports; `tasks/` and `flows/`
wrap it for orchestration."""

__version__ = "0.1.0"
