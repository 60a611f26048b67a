"""crowdpref's SQL-backed search engine for argilla-server 2.8 ("crowdpref-sql").

What it is
----------
argilla-server keeps everything - records, responses, suggestions, vectors, metadata - in its own SQL
database and only *mirrors* it into Elasticsearch/OpenSearch for searching. This plug-in answers the
search-engine interface (``argilla_server.search_engine.base.SearchEngine``) straight from that SQL
database, so the embedded server runs without any search cluster. It registers itself as
``crowdpref-sql``; the server uses it when started with ``ARGILLA_SEARCH_ENGINE=crowdpref-sql`` after
this module has been imported (``services/argilla/launch.py`` imports it before handing over to the
stock CLI).

What it does
------------
* All write hooks (``index_records``, ``partial_record_update``, ``update_record_response``,
  ``delete_*``, ``create_index``, ``configure_*`` ...) are no-ops: the database is the source of truth,
  so a committed change is visible to the next search immediately.
* ``search`` pushes filtering, sorting and paging into SQL: ONE ``SELECT records.id ... ORDER BY ...
  LIMIT/OFFSET`` plus ONE ``COUNT(*)``, with the filter semantics of the Elasticsearch implementation
  (``search_engine/commons.py``): response status filters per user (``pending`` = no response of this
  user, or no response at all when no user is given; other statuses = a response of this user with
  that status; several statuses are OR'ed), response-value filters on a question (terms/range, scoped
  to the user), metadata terms/range filters, suggestion filters (value/score/agent/type), record
  filters (id, external_id, status, inserted_at, updated_at) and a text query. Sorting covers record
  properties, metadata, suggestions and response values (scoped to the user); missing values sort
  last, as in ES. Without a sort the order is ``inserted_at, id``, except when the server passes a
  ``user_id`` (the annotator's ``/me/...`` search): then records come in a per-user shuffled order
  computed in SQL from a keyed hash of the record id - deterministic for one user, independent between
  users, and stable while the queue shrinks (see ``_Shuffle``; there the COUNT is grouped by hash
  bucket, so that the page query only has to hash and sort the one or two buckets the page falls in).
  Every ordering ends with the record id: offset/limit paging visits each record exactly once.
* Dataset progress, user progress and metadata metrics are SQL aggregates (GROUP BY).
* ``similarity_search`` is exact: it streams the vectors of that vector setting for the records that
  pass the filters and ranks them by cosine similarity in Python (O(records x dimensions) per query;
  fine for study-sized datasets, not for millions of vectors). Scores follow ES's cosine score
  ``(1 + cos) / 2``.

What it does NOT promise
------------------------
* No relevance ranking. The text query is case-insensitive SUBSTRING matching (``LIKE``/``ILIKE``) of
  each whitespace-separated term (or "quoted phrase") against the record's text fields; all terms must
  match (ES's ``default_operator: AND``), but there is no tokenisation, stemming or fuzziness, the
  ``simple_query_string`` operators are not interpreted (a leading ``+`` and a trailing ``*`` are
  dropped; ``- | ~ ( )`` are matched literally), and hits carry ``score=1.0`` instead of a BM25 score.
  SQLite only folds ASCII case.
* No search index: every search scans the matching records of the dataset (through the dataset_id
  index), so its cost grows linearly with the dataset: meant for preference studies (tens of thousands
  of records), not for millions (``benchmarks/argilla_search.py`` times the annotator queue at 1k and
  10k records). Similarity search likewise.
* User progress counts this user's responses by status (what the UI shows); the ES version aggregates
  the statuses of all responses on the records this user answered.

Tested on both databases it meets (tests/integration/test_search_engine.py, through argilla-server's
HTTP API): SQLite, the embedded server's, and PostgreSQL, the public profile's (argilla-server with 2
uvicorn workers on the stack's server, services/postgres.py). JSON is read through dialect-aware
helpers (``json_extract``/``json_each``/``json_type`` on SQLite, ``#>``/``#>>``/``json_typeof``/
``json_array_elements_text`` on PostgreSQL).
"""

from __future__ import annotations

import hashlib
import heapq
import math
import re
from datetime import datetime, timezone
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union
from uuid import UUID

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from argilla_server.enums import (
    MetadataPropertyType,
    QuestionType,
    RecordStatus,
    ResponseStatus,
    ResponseStatusFilter,
    SimilarityOrder,
    SortOrder,
    SuggestionType,
)
from argilla_server.errors.future import UnprocessableEntityError
from argilla_server.models import (
    Dataset,
    Field,
    MetadataProperty,
    Question,
    Record,
    Response,
    Suggestion,
    User,
    Vector,
    VectorSettings,
)
from argilla_server.search_engine.base import (
    AndFilter,
    Filter,
    FloatMetadataMetrics,
    IntegerMetadataMetrics,
    MetadataFilterScope,
    MetadataMetrics,
    Order,
    RangeFilter,
    RecordFilterScope,
    ResponseFilterScope,
    SearchEngine,
    SearchResponseItem,
    SearchResponses,
    SuggestionFilterScope,
    TermsFilter,
    TermsMetrics,
    TextQuery,
)

__all__ = ["ENGINE_NAME", "SQLSearchEngine"]

ENGINE_NAME = "crowdpref-sql"

# ES caps terms aggregations at this many buckets (commons.py: max_terms_size).
_MAX_TERMS = 2**14
# Per-user shuffle (see _Shuffle): records are grouped into 16 buckets by the hex digit at a per-user
# position of their id; buckets come in a per-user order, and inside a bucket records are ordered by
# sum(char_code(id_hex[i]) * w_i) mod P over _SHUFFLE_CHARS per-user digit positions with per-user
# weights (ties - rare - by record id). uuid4 hex digits are random except the version (13th, always
# "4") and variant (17th) digits, which are never used.
_SHUFFLE_CHARS = 5
_SHUFFLE_PRIME = 2_147_483_647  # 2**31 - 1
_HEX_DIGITS = "0123456789abcdef"
_RANDOM_HEX_POSITIONS = [p for p in range(1, 33) if p not in (13, 17)]
_ONE = sa.literal_column("1")  # EXISTS (SELECT 1 ...): lets SQLite answer from covering indexes
_TERM_SPLIT = re.compile(r'"([^"]*)"|(\S+)')


class _Dialect:
    """Dialect-aware SQL expressions for JSON access and the per-user shuffle key."""

    def __init__(self, name: str):
        self.name = name
        self.pg = name == "postgresql"

    # --- JSON -----------------------------------------------------------------------------------
    @staticmethod
    def _sqlite_path(path: Sequence[str]) -> str:
        return "$" + "".join('."' + p.replace('"', "") + '"' for p in path)

    @staticmethod
    def _pg_path(path: Sequence[str]) -> sa.ColumnElement:
        return sa.literal(list(path), type_=postgresql.ARRAY(sa.Text))

    def json_text(self, col, path: Sequence[str]) -> sa.ColumnElement:
        """The value at ``path`` as text (strings unquoted, containers as JSON text), NULL if missing."""
        if self.pg:
            return col.op("#>>", return_type=sa.Text)(self._pg_path(path))
        return sa.cast(sa.func.json_extract(col, self._sqlite_path(path)), sa.Text)

    def json_number(self, col, path: Sequence[str]) -> sa.ColumnElement:
        """The value at ``path`` if it is a JSON number, else NULL (never raises on other types)."""
        if self.pg:
            node = col.op("#>", return_type=sa.JSON)(self._pg_path(path))
            return sa.case(
                (
                    sa.func.json_typeof(node) == "number",
                    sa.cast(col.op("#>>", return_type=sa.Text)(self._pg_path(path)), sa.Float),
                ),
                else_=sa.null(),
            )
        p = self._sqlite_path(path)
        return sa.case(
            (sa.func.json_type(col, p).in_(["integer", "real"]), sa.func.json_extract(col, p)),
            else_=sa.null(),
        )

    def json_any_in(self, col, path: Sequence[str], values: Sequence[str]) -> sa.ColumnElement:
        """True if the value at ``path`` (a scalar, or any element of an array) is one of ``values``
        (compared as text) - ES ``terms`` semantics on keyword fields, multi-valued included."""
        values = [str(v) for v in values]
        if self.pg:
            node = col.op("#>", return_type=sa.JSON)(self._pg_path(path))
            as_array = sa.case(
                (sa.func.json_typeof(node) == "array", node),
                else_=sa.func.json_build_array(node),
            )
            elements = sa.func.json_array_elements_text(as_array).table_valued("value")
            return sa.exists(sa.select(_ONE).select_from(elements).where(elements.c.value.in_(values)))
        # json_each on a scalar yields one row holding the scalar; on an array, one row per element.
        elements = sa.func.json_each(col, self._sqlite_path(path)).table_valued("value")
        return sa.exists(
            sa.select(_ONE).select_from(elements).where(sa.cast(elements.c.value, sa.Text).in_(values))
        )

    def json_elements(self, col, path: Sequence[str]):
        """Table-valued FROM item with one ``value`` row per element (or the scalar) at ``path``."""
        if self.pg:
            node = col.op("#>", return_type=sa.JSON)(self._pg_path(path))
            as_array = sa.case(
                (sa.func.json_typeof(node) == "array", node),
                (node.is_(None), sa.cast(sa.literal("[]"), sa.JSON)),
                else_=sa.func.json_build_array(node),
            )
            return sa.func.json_array_elements_text(as_array).table_valued("value")
        return sa.func.json_each(col, self._sqlite_path(path)).table_valued("value")

    # --- per-user shuffle ------------------------------------------------------------------------
    def id_digit(self, position: int) -> sa.ColumnElement:
        """The record id's hex digit at ``position`` (1..32) on both backends - SQLite stores UUIDs as
        32 lowercase hex digits, PostgreSQL's text form has dashes, skipped here - so a user gets the
        same order on either database."""
        if self.pg:
            dashes = sum(position > boundary for boundary in (8, 12, 16, 20))
            text, position = sa.cast(Record.id, sa.Text), position + dashes
        else:
            text = sa.type_coerce(Record.id, sa.Text)
        return sa.func.substr(text, sa.literal_column(str(position)), sa.literal_column("1"))

    def char_code(self, char: sa.ColumnElement) -> sa.ColumnElement:
        if self.pg:
            return sa.cast(sa.func.ascii(char), sa.BigInteger)  # BIGINT: the weighted sum exceeds int4
        return sa.func.unicode(char)

    def shuffle(self, user_id: Union[UUID, str]) -> "_Shuffle":
        return _Shuffle(self, user_id)


def _hash_stream(seed: str) -> Iterator[int]:
    """Endless 64-bit numbers from SHA-256 in counter mode: the same seed gives the same numbers on
    every Python version (unlike ``random``)."""
    counter = 0
    while True:
        block = hashlib.sha256(f"{seed}:{counter}".encode()).digest()
        for i in range(0, len(block), 8):
            yield int.from_bytes(block[i : i + 8], "big")
        counter += 1


def _permuted(items: Sequence[Any], numbers: Iterator[int]) -> list:
    items = list(items)
    for i in range(len(items) - 1, 0, -1):  # Fisher-Yates
        j = next(numbers) % (i + 1)
        items[i], items[j] = items[j], items[i]
    return items


class _Shuffle:
    """A deterministic per-user pseudo-random order of records, evaluated in SQL.

    The order is (bucket rank, key, id): ``bucket`` is the id's hex digit at a per-user position, the
    16 buckets are ranked by a per-user permutation, and ``key`` is a keyed hash of other id digits.
    Splitting it this way lets a page be fetched in two cheap passes instead of hashing and sorting
    the whole queue: one ``GROUP BY bucket`` count (which is also the total), then the page from the
    one or two buckets it falls into - only their records get the full key and a sort. (The two
    passes are not one snapshot: a response committed in between can shift that page by one record,
    much like a concurrent change shifts ES pages.)
    """

    def __init__(self, d: _Dialect, user_id: Union[UUID, str]):
        numbers = _hash_stream(f"crowdpref-shuffle:{user_id}")
        positions = _permuted(_RANDOM_HEX_POSITIONS, numbers)[: _SHUFFLE_CHARS + 1]
        self._rank = {digit: i for i, digit in enumerate(_permuted(_HEX_DIGITS, numbers))}
        self.bucket = d.id_digit(positions[0])
        total = None
        for position in positions[1:]:
            weight = sa.literal_column(str(1 + next(numbers) % (_SHUFFLE_PRIME - 1)), sa.BigInteger)
            term = d.char_code(d.id_digit(position)) * weight
            total = term if total is None else total + term
        self.key = total % sa.literal_column(str(_SHUFFLE_PRIME), sa.BigInteger)

    def rank(self, bucket: str) -> Tuple[int, str]:
        return (self._rank.get(bucket, len(self._rank)), bucket)  # unexpected digits go last

    def window(self, counts: Dict[str, int], offset: int, limit: int) -> Tuple[List[str], int]:
        """The buckets (in rank order) holding rows offset..offset+limit-1, and how many rows of the
        first of them come before the window."""
        chosen: List[str] = []
        skip = 0
        seen = 0
        for bucket in sorted(counts, key=self.rank):
            n = counts[bucket]
            if seen + n <= offset:
                seen += n
                continue
            if seen >= offset + limit:
                break
            if not chosen:
                skip = offset - seen
            chosen.append(bucket)
            seen += n
        return chosen, skip

    def order_within(self, buckets: List[str]) -> List[sa.ColumnElement]:
        rank = [sa.case({b: i for i, b in enumerate(buckets)}, value=self.bucket)] if len(buckets) > 1 else []
        return rank + [self.key.asc(), Record.id.asc()]


class _Schema:
    """The few dataset definitions a query needs, loaded lazily (one small indexed query each)."""

    def __init__(self, session: AsyncSession, dataset_id: UUID):
        self._session = session
        self._dataset_id = dataset_id
        self._questions: Optional[Dict[str, Tuple[UUID, Optional[str]]]] = None
        self._metadata: Optional[Dict[str, Optional[str]]] = None
        self._fields: Optional[Dict[str, Optional[str]]] = None

    async def question(self, name: str) -> Tuple[UUID, Optional[str]]:
        if self._questions is None:
            rows = await self._session.execute(
                sa.select(Question.name, Question.id, Question.settings).where(Question.dataset_id == self._dataset_id)
            )
            self._questions = {n: (i, (s or {}).get("type")) for n, i, s in rows}
        if name not in self._questions:
            raise UnprocessableEntityError(f"Question `{name}` not found in dataset `{self._dataset_id}`.")
        return self._questions[name]

    async def metadata_type(self, name: str) -> Optional[str]:
        if self._metadata is None:
            rows = await self._session.execute(
                sa.select(MetadataProperty.name, MetadataProperty.settings).where(
                    MetadataProperty.dataset_id == self._dataset_id
                )
            )
            self._metadata = {n: (s or {}).get("type") for n, s in rows}
        return self._metadata.get(name)

    async def fields(self) -> Dict[str, Optional[str]]:
        if self._fields is None:
            rows = await self._session.execute(
                sa.select(Field.name, Field.settings).where(Field.dataset_id == self._dataset_id)
            )
            self._fields = {n: (s or {}).get("type") for n, s in rows}
        return self._fields


def _enum_values(enum_cls, values: Iterable[Any]) -> list:
    valid = {e.value for e in enum_cls}
    return [enum_cls(str(v)) for v in values if str(v) in valid]


def _to_uuid(value: Any) -> Optional[UUID]:
    try:
        return value if isinstance(value, UUID) else UUID(str(value))
    except (TypeError, ValueError):
        return None


def _to_datetime(value: Any) -> datetime:
    """ES date semantics: numbers are epoch milliseconds, strings ISO 8601. Stored values are naive UTC."""
    try:
        if isinstance(value, (int, float)):
            parsed = datetime.fromtimestamp(float(value) / 1000.0, tz=timezone.utc)
        else:
            parsed = datetime.fromisoformat(str(value).strip())
    except (TypeError, ValueError, OverflowError) as e:
        raise UnprocessableEntityError(f"Cannot interpret `{value}` as a date (use ISO 8601 or epoch millis)") from e
    if parsed.tzinfo is not None:
        parsed = parsed.astimezone(timezone.utc).replace(tzinfo=None)
    return parsed


def _range(expr: sa.ColumnElement, ge: Any, le: Any) -> sa.ColumnElement:
    conds = [expr.is_not(None)]
    if ge is not None:
        conds.append(expr >= ge)
    if le is not None:
        conds.append(expr <= le)
    return sa.and_(*conds)


def _number(value: Any) -> Optional[float]:
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError) as e:
        raise UnprocessableEntityError(f"Range bound `{value}` is not a number") from e


def _text_terms(q: str) -> List[str]:
    """Terms of a text query: whitespace-separated words or "quoted phrases"; a trailing ``*``
    (prefix query) is dropped because matching is by substring anyway."""
    terms = []
    for phrase, word in _TERM_SPLIT.findall(q):
        term = (phrase or word).strip()
        if word:
            term = term.lstrip("+").rstrip("*")
        if term:
            terms.append(term)
    return terms


_SESSIONS: Optional[async_sessionmaker] = None


def _own_sessions() -> async_sessionmaker:
    """Sessions on the search engine's OWN connection pool (one per server process, made on
    first use, the same database and pool settings as argilla-server's).

    Argilla's request handlers hold a session from ``argilla_server.database``'s pool while they
    await a search. Searching from that same pool deadlocks it under load: once every connection
    is held by a handler waiting for a second one, nothing is returned until SQLAlchemy's 30-s
    pool timeout, and each waiting request answers 500 ("QueuePool limit ... reached"). That is
    what 200 arrivals in 10 s met on the public profile (issue 19: searches p50 30 s, 66 such
    errors). With its own pool the search never waits for a connection a handler holds."""
    global _SESSIONS
    if _SESSIONS is None:
        from argilla_server.settings import settings
        from sqlalchemy.ext.asyncio import create_async_engine

        engine = create_async_engine(settings.database_url, **settings.database_engine_args)
        _SESSIONS = async_sessionmaker(autocommit=False, expire_on_commit=False, bind=engine)
    return _SESSIONS


@SearchEngine.register(engine_name=ENGINE_NAME)
class SQLSearchEngine(SearchEngine):
    """Search engine answering argilla-server's search interface from its own SQL database."""

    def __init__(self, sessionmaker: Optional[async_sessionmaker] = None):
        self._sessionmaker = sessionmaker or _own_sessions()

    @classmethod
    async def new_instance(cls) -> "SQLSearchEngine":
        return cls()

    async def close(self):
        pass  # sessions are opened and closed per call; the pool lives as long as the process

    @staticmethod
    def _dialect(session: AsyncSession) -> _Dialect:
        return _Dialect(session.get_bind().dialect.name)

    async def ping(self) -> bool:
        try:
            async with self._sessionmaker() as session:
                return (await session.execute(sa.select(_ONE))).scalar() == 1
        except Exception:
            return False

    async def info(self) -> dict:
        async with self._sessionmaker() as session:
            dialect = session.get_bind().dialect
            version = ".".join(str(v) for v in (dialect.server_version_info or ())) or "unknown"
            return {
                "distribution": ENGINE_NAME,
                "number": "1",
                "description": "searches argilla-server's SQL database directly; substring text matching, "
                "no relevance ranking",
                "database": dialect.name,
                "database_version": version,
            }

    # --- write hooks: the database is the source of truth ----------------------------------------
    async def create_index(self, dataset: Dataset):
        pass

    async def delete_index(self, dataset: Dataset):
        pass

    async def configure_metadata_property(self, dataset: Dataset, metadata_property: MetadataProperty):
        pass

    async def configure_index_vectors(self, vector_settings: VectorSettings):
        pass

    async def index_records(self, dataset: Dataset, records: Iterable[Record]):
        pass

    async def partial_record_update(self, record: Record, **update):
        pass

    async def delete_records(self, dataset: Dataset, records: Iterable[Record]):
        pass

    async def update_record_response(self, response: Response):
        pass

    async def delete_record_response(self, response: Response):
        pass

    async def update_record_suggestion(self, suggestion: Suggestion):
        pass

    async def delete_record_suggestion(self, suggestion: Suggestion):
        pass

    # --- progress and metrics ---------------------------------------------------------------------
    async def get_dataset_progress(self, dataset: Dataset) -> dict:
        if dataset.is_draft:
            return {}
        async with self._sessionmaker() as session:
            rows = await session.execute(
                sa.select(Record.status, sa.func.count())
                .where(Record.dataset_id == dataset.id)
                .group_by(Record.status)
            )
            counts = {RecordStatus(status).value: n for status, n in rows}
        result = {"total": sum(counts.values())}
        result.update({status.value: counts.get(status.value, 0) for status in RecordStatus})
        return result

    async def get_dataset_user_progress(self, dataset: Dataset, user: User) -> dict:
        if dataset.is_draft:
            return {}
        async with self._sessionmaker() as session:
            rows = await session.execute(
                sa.select(Response.status, sa.func.count())
                .join(Record, Record.id == Response.record_id)
                .where(Record.dataset_id == dataset.id, Response.user_id == user.id)
                .group_by(Response.status)
            )
            counts = {ResponseStatus(status).value: n for status, n in rows}
        result = {"total": sum(counts.values())}
        result.update({status.value: counts.get(status.value, 0) for status in ResponseStatus})
        return result

    async def compute_metrics_for(self, metadata_property: MetadataProperty) -> MetadataMetrics:
        dataset_id = metadata_property.dataset_id
        name = metadata_property.name
        async with self._sessionmaker() as session:
            d = self._dialect(session)
            if metadata_property.type == MetadataPropertyType.terms:
                elements = d.json_elements(Record.metadata_, [name])
                value = sa.cast(elements.c.value, sa.Text) if not d.pg else elements.c.value
                count = sa.func.count().label("n")
                rows = (
                    await session.execute(
                        sa.select(value.label("term"), count)
                        .select_from(Record)
                        .join(elements, sa.true())
                        .where(Record.dataset_id == dataset_id, value.is_not(None))
                        .group_by(value)
                        .order_by(count.desc(), value.asc())
                    )
                ).all()
                return TermsMetrics(
                    total=sum(n for _, n in rows),
                    values=[TermsMetrics.TermCount(term=term, count=n) for term, n in rows[:_MAX_TERMS]],
                )

            number = d.json_number(Record.metadata_, [name])
            low, high = (
                await session.execute(
                    sa.select(sa.func.min(number), sa.func.max(number)).where(Record.dataset_id == dataset_id)
                )
            ).one()
            if metadata_property.type == MetadataPropertyType.integer:
                return IntegerMetadataMetrics(
                    min=None if low is None else int(low), max=None if high is None else int(high)
                )
            return FloatMetadataMetrics(
                min=None if low is None else float(low), max=None if high is None else float(high)
            )

    # --- search -------------------------------------------------------------------------------------
    async def search(
        self,
        dataset: Dataset,
        query: Optional[Union[TextQuery, str]] = None,
        filter: Optional[Filter] = None,
        sort: Optional[List[Order]] = None,
        offset: int = 0,
        limit: int = 100,
        user_id: Optional[Union[UUID, str]] = None,
    ) -> SearchResponses:
        offset, limit = max(offset, 0), max(limit, 0)
        async with self._sessionmaker() as session:
            d = self._dialect(session)
            schema = _Schema(session, dataset.id)
            where = await self._where(d, schema, dataset.id, query, filter)

            if user_id and not sort:
                ids, total = await self._shuffled_page(session, d.shuffle(user_id), where, offset, limit)
            else:
                order_by = await self._order_by(d, schema, sort) if sort else []
                order_by += [Record.inserted_at.asc(), Record.id.asc()]
                ids = (
                    await session.execute(
                        sa.select(Record.id).where(*where).order_by(*order_by).offset(offset).limit(limit)
                    )
                ).scalars().all()
                count = sa.select(sa.func.count()).select_from(Record).where(*where)
                total = (await session.execute(count)).scalar_one()

        score = 1.0 if query else None
        return SearchResponses(items=[SearchResponseItem(record_id=i, score=score) for i in ids], total=total)

    @staticmethod
    async def _shuffled_page(
        session: AsyncSession, shuffle: _Shuffle, where: List[sa.ColumnElement], offset: int, limit: int
    ) -> Tuple[List[UUID], int]:
        bucket = shuffle.bucket.label("bucket")
        rows = await session.execute(sa.select(bucket, sa.func.count()).where(*where).group_by(bucket))
        counts = {b: n for b, n in rows}
        total = sum(counts.values())
        buckets, skip = shuffle.window(counts, offset, limit)
        if not buckets or not limit:
            return [], total
        page = (
            sa.select(Record.id)
            .where(*where, shuffle.bucket.in_(buckets))
            .order_by(*shuffle.order_within(buckets))
            .offset(skip)
            .limit(limit)
        )
        return list((await session.execute(page)).scalars().all()), total

    async def _where(
        self,
        d: _Dialect,
        schema: _Schema,
        dataset_id: UUID,
        query: Optional[Union[TextQuery, str]],
        filter: Optional[Filter],
    ) -> List[sa.ColumnElement]:
        where = [Record.dataset_id == dataset_id]
        if query:
            where.append(await self._text_condition(d, schema, query))
        if filter:
            where.append(await self._filter_condition(d, schema, filter))
        return where

    async def _text_condition(self, d: _Dialect, schema: _Schema, query: Union[TextQuery, str]) -> sa.ColumnElement:
        text = TextQuery(q=query) if isinstance(query, str) else query
        fields = await schema.fields()
        if text.field:
            if text.field not in fields:
                raise UnprocessableEntityError(f"Field `{text.field}` not found in dataset `{schema._dataset_id}`.")
            names = [text.field]
        else:
            names = [name for name, kind in fields.items() if kind != "image"]
        terms = _text_terms(text.q)
        if not terms or not names:
            return sa.true() if not terms else sa.false()
        values = [d.json_text(Record.fields, [name]) for name in names]
        return sa.and_(*[sa.or_(*[v.icontains(term, autoescape=True) for v in values]) for term in terms])

    async def _filter_condition(self, d: _Dialect, schema: _Schema, filter: Filter) -> sa.ColumnElement:
        if isinstance(filter, AndFilter):
            conds = [await self._filter_condition(d, schema, f) for f in filter.filters]
            return sa.and_(sa.true(), *conds)
        if not isinstance(filter, (TermsFilter, RangeFilter)):
            raise UnprocessableEntityError(f"Cannot process filter {filter}")

        scope = filter.scope
        if isinstance(scope, ResponseFilterScope):
            return await self._response_condition(d, schema, filter)
        if isinstance(scope, MetadataFilterScope):
            path = [scope.metadata_property]
            if isinstance(filter, TermsFilter):
                return d.json_any_in(Record.metadata_, path, filter.values)
            return _range(d.json_number(Record.metadata_, path), _number(filter.ge), _number(filter.le))
        if isinstance(scope, SuggestionFilterScope):
            return await self._suggestion_condition(d, schema, filter)
        if isinstance(scope, RecordFilterScope):
            return self._record_condition(d, filter)
        raise UnprocessableEntityError(f"Cannot process filter scope {scope}")

    @staticmethod
    def _record_condition(d: _Dialect, filter: Union[TermsFilter, RangeFilter]) -> sa.ColumnElement:
        prop = str(filter.scope.property)
        if prop in ("inserted_at", "updated_at"):
            column = getattr(Record, prop)
            if isinstance(filter, TermsFilter):
                return column.in_([_to_datetime(v) for v in filter.values])
            ge = None if filter.ge is None else _to_datetime(filter.ge)
            le = None if filter.le is None else _to_datetime(filter.le)
            return _range(column, ge, le)
        if prop == "id" and isinstance(filter, TermsFilter):
            ids = [u for u in (_to_uuid(v) for v in filter.values) if u is not None]
            return Record.id.in_(ids) if ids else sa.false()
        if prop == "external_id":
            if isinstance(filter, TermsFilter):
                return Record.external_id.in_([str(v) for v in filter.values])
            return _range(Record.external_id, filter.ge, filter.le)
        if prop == "status" and isinstance(filter, TermsFilter):
            statuses = _enum_values(RecordStatus, filter.values)
            if not statuses:
                return sa.false()
            if d.pg:  # PostgreSQL has column statistics and picks the right index by itself
                return Record.status.in_(statuses)
            # SQLite (no statistics) would walk the status index - pending records of EVERY dataset -
            # instead of the dataset_id one; comparing the status as text keeps it on dataset_id.
            return sa.cast(Record.status, sa.Text).in_([status.value for status in statuses])
        raise UnprocessableEntityError(f"Cannot filter records by `{prop}` with a {type(filter).__name__}")

    async def _response_condition(
        self, d: _Dialect, schema: _Schema, filter: Union[TermsFilter, RangeFilter]
    ) -> sa.ColumnElement:
        scope: ResponseFilterScope = filter.scope
        of_user = [Response.record_id == Record.id]
        if scope.user is not None:
            of_user.append(Response.user_id == scope.user.id)

        if scope.question:
            await schema.question(scope.question)  # 422 for an unknown question
            path = [scope.question, "value"]
            if isinstance(filter, TermsFilter):
                cond = d.json_any_in(Response.values, path, filter.values)
            else:
                cond = _range(d.json_number(Response.values, path), _number(filter.ge), _number(filter.le))
            return sa.exists(sa.select(_ONE).where(*of_user, cond))

        if scope.property == "status" and isinstance(filter, TermsFilter):
            requested = [str(v) for v in filter.values]
            conds = []
            if ResponseStatusFilter.pending.value in requested:
                # pending = this user has not responded at all (no user: nobody has)
                conds.append(~sa.exists(sa.select(_ONE).where(*of_user)))
            others = [v for v in requested if v != ResponseStatusFilter.pending.value]
            statuses = _enum_values(ResponseStatus, others)
            if statuses:
                conds.append(sa.exists(sa.select(_ONE).where(*of_user, Response.status.in_(statuses))))
            return sa.or_(*conds) if conds else sa.false()

        raise UnprocessableEntityError(f"Cannot process filter scope {scope}")

    async def _suggestion_condition(
        self, d: _Dialect, schema: _Schema, filter: Union[TermsFilter, RangeFilter]
    ) -> sa.ColumnElement:
        scope: SuggestionFilterScope = filter.scope
        question_id, _ = await schema.question(scope.question)
        prop = str(scope.property or "value")
        if prop in ("value", "score"):
            column = Suggestion.value if prop == "value" else Suggestion.score
            if isinstance(filter, TermsFilter):
                cond = d.json_any_in(column, [], filter.values)
            else:
                cond = _range(d.json_number(column, []), _number(filter.ge), _number(filter.le))
        elif prop == "agent":
            if isinstance(filter, TermsFilter):
                cond = Suggestion.agent.in_([str(v) for v in filter.values])
            else:
                cond = _range(Suggestion.agent, filter.ge, filter.le)
        elif prop == "type" and isinstance(filter, TermsFilter):
            types = _enum_values(SuggestionType, filter.values)
            cond = Suggestion.type.in_(types) if types else sa.false()
        else:
            raise UnprocessableEntityError(f"Cannot filter suggestions by `{prop}` with a {type(filter).__name__}")
        return sa.exists(
            sa.select(_ONE).where(
                Suggestion.record_id == Record.id, Suggestion.question_id == question_id, cond
            )
        )

    async def _order_by(self, d: _Dialect, schema: _Schema, sort: List[Order]) -> List[sa.ColumnElement]:
        clauses = []
        for order in sort:
            expr = await self._sort_expression(d, schema, order.scope)
            direction = expr.desc() if str(order.order) == SortOrder.desc.value else expr.asc()
            clauses.append(direction.nulls_last())  # ES sorts missing values last in both directions
        return clauses

    async def _sort_expression(self, d: _Dialect, schema: _Schema, scope) -> sa.ColumnElement:
        if isinstance(scope, RecordFilterScope):
            prop = str(scope.property)
            if prop not in ("id", "external_id", "inserted_at", "updated_at", "status"):
                raise UnprocessableEntityError(f"Cannot sort records by `{prop}`")
            if prop == "status":
                return sa.cast(Record.status, sa.Text)
            return getattr(Record, prop)

        if isinstance(scope, MetadataFilterScope):
            kind = await schema.metadata_type(scope.metadata_property)
            path = [scope.metadata_property]
            if kind in (MetadataPropertyType.integer.value, MetadataPropertyType.float.value):
                return d.json_number(Record.metadata_, path)
            return d.json_text(Record.metadata_, path)

        if isinstance(scope, SuggestionFilterScope):
            question_id, question_type = await schema.question(scope.question)
            prop = str(scope.property or "value")
            if prop == "value":
                expr = (
                    d.json_number(Suggestion.value, [])
                    if question_type == QuestionType.rating.value
                    else d.json_text(Suggestion.value, [])
                )
            elif prop == "score":
                expr = d.json_number(Suggestion.score, [])
            elif prop == "agent":
                expr = Suggestion.agent
            elif prop == "type":
                expr = sa.cast(Suggestion.type, sa.Text)
            else:
                raise UnprocessableEntityError(f"Cannot sort by suggestion property `{prop}`")
            return (
                sa.select(expr)
                .where(Suggestion.record_id == Record.id, Suggestion.question_id == question_id)
                .limit(1)
                .scalar_subquery()
            )

        if isinstance(scope, ResponseFilterScope):
            of_user = [Response.record_id == Record.id]
            if scope.user is not None:
                of_user.append(Response.user_id == scope.user.id)
            if scope.question:
                _, question_type = await schema.question(scope.question)
                path = [scope.question, "value"]
                if question_type == QuestionType.rating.value:
                    agg = sa.func.avg(d.json_number(Response.values, path))  # ES: mode "avg"
                else:
                    agg = sa.func.min(d.json_text(Response.values, path))
            elif scope.property == "status":
                agg = sa.func.min(sa.cast(Response.status, sa.Text))
            else:
                raise UnprocessableEntityError(f"Cannot sort by response scope {scope}")
            return sa.select(agg).where(*of_user).scalar_subquery()

        raise UnprocessableEntityError(f"Cannot sort by scope {scope}")

    # --- vectors ------------------------------------------------------------------------------------
    async def similarity_search(
        self,
        dataset: Dataset,
        vector_settings: VectorSettings,
        value: Optional[List[float]] = None,
        record: Optional[Record] = None,
        query: Optional[Union[TextQuery, str]] = None,
        filter: Optional[Filter] = None,
        max_results: int = 100,
        order: SimilarityOrder = SimilarityOrder.most_similar,
        threshold: Optional[float] = None,
    ) -> SearchResponses:
        """Exact cosine ranking over the filtered records' vectors, streamed from SQL (see module doc)."""
        if bool(value) == bool(record):
            raise ValueError("Must provide either vector value or record to compute the similarity search")

        excluded_id = None
        target = value
        if record is not None:
            excluded_id = record.id
            target = record.vector_value_by_vector_settings(vector_settings)
        if not target:
            raise ValueError("Cannot find a vector value to apply with provided info")
        if order == SimilarityOrder.least_similar:
            target = [-x for x in target]  # as ES does: most similar to the inverted vector
        target_norm = math.sqrt(sum(x * x for x in target)) or 1.0

        def score(candidate: List[float]) -> float:
            norm = math.sqrt(sum(x * x for x in candidate))
            if not norm or len(candidate) != len(target):
                return 0.0
            cosine = sum(a * b for a, b in zip(target, candidate)) / (norm * target_norm)
            return (1.0 + cosine) / 2.0  # ES's score for cosine similarity

        async with self._sessionmaker() as session:
            d = self._dialect(session)
            where = await self._where(d, _Schema(session, dataset.id), dataset.id, query, filter)
            stmt = (
                sa.select(Vector.record_id, Vector.value)
                .join(Record, Record.id == Vector.record_id)
                .where(Vector.vector_settings_id == vector_settings.id, *where)
            )
            if excluded_id is not None:
                stmt = stmt.where(Record.id != excluded_id)
            best: List[Tuple[float, str, UUID]] = []
            k = max(max_results, 0)
            async for record_id, vector in await session.stream(stmt):
                entry = (score(vector or []), str(record_id), record_id)
                if len(best) < k:
                    heapq.heappush(best, entry)
                elif k and entry > best[0]:
                    heapq.heapreplace(best, entry)

        ranked = sorted(best, key=lambda e: (-e[0], e[1]))
        if threshold is not None:
            ranked = [e for e in ranked if e[0] >= threshold]
        items = [SearchResponseItem(record_id=rid, score=s) for s, _, rid in ranked]
        return SearchResponses(items=items, total=len(items))

