"""Memory: the pipeline's services composed over one Storage. What the server, MCP and the CLI hold.

Where each operation goes (one path each; a fork, a grant or an option is a parameter of it, never a copy):

    remember, accept, upsert   -> writer      (datastore/write/remember.py: chunk -> embed -> roll up -> commit)
    forget (/delete)           -> deleter     (datastore/write/delete.py: remove messages, rebuild the tree)
    query, expand, a node      -> reader      (datastore/read/query.py: validate -> rank -> neighbours -> visits,
                                               ranked over `search`: datastore/indexes/search.py)
    find                       -> finder      (datastore/read/find.py: exact/regex search of the messages)
    conversations, messages    -> listing     (datastore/read/listing.py)
    stats of a namespace       -> describer   (datastore/read/stats.py)
    lines, outline             -> outline     (datastore/read/outline.py: each message's lead, level-0 nodes
                                               written with the chunks; `outline.lines` for /context)
    /context                   -> context     (datastore/context/assemble.py, through reader and core)
    core memory                -> core        (datastore/context/core.py)
    standing instructions      -> instructions (datastore/lifetime/instructions.py; found and dropped with the
                                               messages by the writer, steps and deleter: write/instructions.py)
    visits and pins            -> visits      (datastore/lifetime/visits.py)
    forks                      -> forks       (datastore/lifetime/forks.py; reading a fork is the reader's)
    sessions of a conversation -> sessions    (datastore/lifetime/sessions.py)
    forgetting by policy       -> policy      (datastore/lifetime/policy.py)
    background indexing steps  -> steps       (datastore/indexing/steps.py; the lanes: indexing/background.py)
    Idempotency-Key answers    -> idempotency (datastore/write/idempotency.py)
    export, import, migrate    -> functions of datastore/portability over two Memory objects

Every service is synchronous and receives what it uses in its constructor; the server runs them in worker
threads. `open_memory` (datastore/factory.py) opens the configured Storage and composes a Memory.
"""

from __future__ import annotations

from datastore.context.assemble import ContextAssembler
from datastore.context.core import CoreMemory
from datastore.indexes.search import IndexedSearch
from datastore.indexing.steps import IndexSteps
from datastore.lifetime.forks import Forks
from datastore.lifetime.instructions import Instructions
from datastore.lifetime.policy import ForgettingPolicy
from datastore.lifetime.sessions import Sessions
from datastore.lifetime.visits import Visits
from datastore.locks import Leases, SourceLocks
from datastore.read.find import Finder
from datastore.read.listing import Listing
from datastore.read.outline import Outline
from datastore.read.query import Reader
from datastore.read.ranking import Floor
from datastore.read.stats import Describer
from datastore.storage import Storage
from datastore.write.build import TreeBuilder
from datastore.write.delete import Deleter
from datastore.write.idempotency import Idempotency
from datastore.write.instructions import InstructionKeeper
from datastore.write.remember import Writer
from models.settings import Settings
from services.clock import Clock, system_clock
from services.embedding import Embedder
from services.errors import EmbeddingMismatchError
from services.instructions import Detector
from services.summarising import Summariser
from services.tokens import get_encoding


class Memory:
    """The services of the pipeline over one opened Storage (see the module docstring for which does what).

    settings: the one settings object. storage: an opened provider (its optional capabilities are read here,
    once, by the services that use them). embedder: chunk and query embeddings. summariser: the roll-up's
    summaries. detector: finds standing instructions in the messages being indexed (services/instructions.py,
    `make_detector`). clock: the time the services read (services/clock.py; tests move one by hand). Raises
    EmbeddingMismatchError when the store holds another model's vectors (or, on Pinecone, the index has another
    dimension); the storage is closed whenever this raises (it is the Memory's from here on)."""

    def __init__(
        self,
        settings: Settings,
        storage: Storage,
        embedder: Embedder,
        summariser: Summariser,
        detector: Detector,
        clock: Clock = system_clock,
    ) -> None:
        model, dimension = embedder.model_name, embedder.dimension
        try:  # a provider may refuse in record_embedding itself (Pinecone: the index's own dimension)
            recorded = storage.record_embedding(model, dimension)
            if recorded != (model, dimension):
                raise EmbeddingMismatchError(
                    f"the {storage.name} store ({storage.location}) holds {recorded[0]} vectors of dimension "
                    f"{recorded[1]}, but the embedder is {model} ({dimension}); use another store or the same "
                    "embedder"
                )
        except BaseException:
            storage.close()  # the Memory owns the storage it is given: a refused one is closed, not left open
            raise
        self.settings = settings
        self.storage = storage
        self.embedder = embedder
        self.summariser = summariser
        self.detector = detector
        self.clock = clock
        leases = storage.leases  # a provider without transactions: its writers' locks span processes
        locks = SourceLocks(
            None if leases is None else Leases(leases, settings.lease_seconds, settings.lease_settle_seconds, clock)
        )
        builder = TreeBuilder(settings, embedder, summariser)
        keeper = InstructionKeeper(storage, detector, embedder, locks)
        self.visits = Visits(storage)
        self.search = IndexedSearch(settings, storage, dimension)  # one ranking above every provider
        self.deleter = Deleter(settings, storage, builder, locks, keeper, self.search.indexes.forgotten)
        self.writer = Writer(
            settings, storage, builder, locks, keeper, self.deleter.refresh_forks, self.search.indexes.forgotten
        )
        self.reader = Reader(settings, storage, self.search, embedder, self.visits)
        self.finder = Finder(settings, storage)
        self.listing = Listing(storage)
        self.describer = Describer(storage)
        self.outline = Outline(
            storage, embedder, self.search, Floor(settings.context_min_score, settings.context_min_cosine)
        )
        self.core = CoreMemory(settings, storage, self.writer, self.deleter, locks, clock)
        self.instructions = Instructions(storage, keeper)
        self.context = ContextAssembler(
            settings,
            storage,
            embedder,
            self.reader,
            self.core,
            self.visits,
            self.instructions if storage.instructions is not None else None,
            self.outline,
        )
        self.forks = Forks(storage, self.deleter)
        self.sessions = Sessions(storage)
        self.policy = ForgettingPolicy(settings, storage, self.deleter, self.visits)
        self.steps = IndexSteps(settings, storage, builder, locks, keeper)
        self.idempotency = Idempotency(storage.idempotency, clock)

    @property
    def name(self) -> str:
        """The provider's name: "local", "postgres" or "pinecone"."""
        return self.storage.name

    @property
    def location(self) -> str:
        """Where the store lives, for messages (a file, a database, an index); never a secret."""
        return self.storage.location

    def warm_up(self) -> None:
        """Pay now what the first requests after a start would: the embedding model's first run and the cl100k
        encoding's load (every /context counts tokens: 0.35-0.6 s on the first one, bench/RESULTS.md, many
        users). Blocking; a server calls it before it says it is ready (server/app.py)."""
        self.embedder.embed(["warm up"])
        get_encoding()

    def close(self) -> None:
        """Write the buffered visits, then release the storage; the Memory can't be used afterwards. Callers stop
        the background indexer first (server/app.py does), so no step runs on a closed storage."""
        try:
            self.visits.flush()
            self.search.indexes.close()  # the index snapshots queued are written
        finally:
            self.storage.close()
