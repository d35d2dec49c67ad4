"""A local Parquet store of the deployment's records, kept current by incremental sync.

Layout of a store directory (``pmtk-store`` unless told otherwise)::

    pmtk-store/
      manifest.json                    "kind": "pmtk-store"; what is stored, how fresh,
                                       which schema, and the sha256 of every data file
      Appointment/data-<sha16>.parquet one dataset per resource ...
      appointment_participant/data-<sha16>.parquet   ... and per child table of its view
      Referral/data-<sha16>.parquet
      .staging/<Resource>/             only while a sync of <Resource> is unfinished
        state.json                     the checkpoint: query, pages done, high-water mark
        <table>/part-000001.parquet    one part file per fetched page and table
        merged/<table>.parquet         merged datasets waiting to be swapped in
      .lock                            held (filelock: flock or msvcrt) while a sync writes

How a resource is synced (:func:`sync`):

1. **Fetch.** The list endpoint is walked page by page (``_count=100``). Each
   page is flattened with :func:`toolkit.views.flatten_tables` and written as
   its own part file, then the checkpoint is replaced atomically. Memory holds
   one page (plus a few prefetched ones), never the resource.
2. **Validate.** The staged rows are validated with
   :func:`toolkit.schemas.validate` in bounded batches.
3. **Merge.** The parts are merged by ``id`` into the current dataset with
   ``scan_parquet``/``sink_parquet`` (streaming): the staged version of a record
   replaces the stored one unless that is strictly newer (one rule for every
   path: :mod:`toolkit.store.precedence`), and the child-table rows of a
   replaced record are replaced as a whole.
4. **Commit.** Each merged file is fsynced and moved to a new name derived
   from its sha256 (``data-<first 16 hex digits>.parquet``), beside the file
   it replaces, and the manifest, which names the files and their checksums,
   is replaced last: that single :func:`os.replace` switches the resource from
   the old files to the new ones. The files of the previous version are then
   deleted. The checkpoint records the commit first, so a crash half-way
   through is rolled forward by the next run; until then the old manifest
   still names the old files, which are intact. Every file, and every folder
   whose entries changed, is fsynced before the manifest points at it.

A store belongs to one deployment: its manifest records the base URL and a
one-way hash of the client id (:class:`Deployment`), and a sync, ``pmtk listen``
or ``load(..., deployment=client)`` refuses a store of another one
(:class:`WrongDeployment`; ``rebind=True`` discards its data and syncs in full).
The embedded mock's default folder is ``pmtk-store-mock``, a configured
deployment's ``pmtk-store`` (:func:`default_store`). A symbolic link inside a
store is never written or deleted through (:class:`StoreLinked`).

The store never takes over a folder it did not create: :func:`sync` writes only
into a missing or empty folder, or into a folder whose ``manifest.json`` carries
``"kind": "pmtk-store"`` (:class:`NotAStore` otherwise, before writing
anything). A damaged manifest is never overwritten (:class:`ManifestDamaged`).
:func:`load` and :func:`verify` compare every data file with the checksum the
manifest recorded (:class:`StoreDamaged`), and read a file only at the path pmtk
writes for its table (:mod:`toolkit.store.paths`); a local write failure (disk
full, read-only or forbidden folder) is one :class:`StoreWriteError` naming the file.

Incremental semantics: the manifest keeps, per resource, the server-side
high-water mark (the greatest ``meta.lastUpdated`` stored). The next sync asks
for ``_lastUpdated=ge<mark>`` -- ``ge``, not ``gt``, so that a record written
in the same clock tick as the mark, after the previous sync read that tick, is
not lost. The records at the mark come back again; merging by ``id`` makes that
harmless, and when every returned row equals the stored one the dataset is left
untouched. A re-sync with nothing changed therefore costs one list request per
resource (plus a token).

A changed view (the schema version, a hash of every table's columns and dtypes)
forces a full sync of that resource, as does ``full=True``.
"""

from __future__ import annotations

from toolkit.store.checksums import (
    VerifyReport as VerifyReport,
)
from toolkit.store.checksums import (
    verify as verify,
)
from toolkit.store.entry import (
    load as load,
)
from toolkit.store.entry import (
    sync as sync,
)
from toolkit.store.identity import (
    Deployment as Deployment,
)
from toolkit.store.identity import (
    WrongDeployment as WrongDeployment,
)
from toolkit.store.identity import (
    default_store as default_store,
)
from toolkit.store.identity import (
    deployment_of as deployment_of,
)
from toolkit.store.layout import (
    check_folder as check_folder,
)
from toolkit.store.layout import (
    declared_schemas as declared_schemas,
)
from toolkit.store.layout import (
    read_manifest as read_manifest,
)
from toolkit.store.layout import (
    schema_version as schema_version,
)
from toolkit.store.merge import (
    LOCK_WAIT as LOCK_WAIT,
)
from toolkit.store.merge import (
    ChangeResult as ChangeResult,
)
from toolkit.store.merge import (
    apply_changes as apply_changes,
)
from toolkit.store.merge import (
    delete as delete,
)
from toolkit.store.merge import (
    upsert as upsert,
)
from toolkit.store.progress import (
    NOTICE_MIN_WAIT as NOTICE_MIN_WAIT,
)
from toolkit.store.progress import (
    DisplayMode as DisplayMode,
)
from toolkit.store.progress import (
    SyncProgress as SyncProgress,
)
from toolkit.store.results import (
    COMPARE_LIMIT as COMPARE_LIMIT,
)
from toolkit.store.results import (
    DEFAULT_STORE as DEFAULT_STORE,
)
from toolkit.store.results import (
    MANIFEST as MANIFEST,
)
from toolkit.store.results import (
    MOCK_STORE as MOCK_STORE,
)
from toolkit.store.results import (
    PAGE_SIZE as PAGE_SIZE,
)
from toolkit.store.results import (
    PART_COLUMN as PART_COLUMN,
)
from toolkit.store.results import (
    PREFETCH_PAGES as PREFETCH_PAGES,
)
from toolkit.store.results import (
    STAGING as STAGING,
)
from toolkit.store.results import (
    STATE_FILE as STATE_FILE,
)
from toolkit.store.results import (
    STORE_FORMAT as STORE_FORMAT,
)
from toolkit.store.results import (
    STORE_KIND as STORE_KIND,
)
from toolkit.store.results import (
    VALIDATION_BATCH_ROWS as VALIDATION_BATCH_ROWS,
)
from toolkit.store.results import (
    ErrorsMode as ErrorsMode,
)
from toolkit.store.results import (
    FileProblem as FileProblem,
)
from toolkit.store.results import (
    ManifestDamaged as ManifestDamaged,
)
from toolkit.store.results import (
    Mode as Mode,
)
from toolkit.store.results import (
    NotAStore as NotAStore,
)
from toolkit.store.results import (
    PageProgress as PageProgress,
)
from toolkit.store.results import (
    PageSource as PageSource,
)
from toolkit.store.results import (
    PageWalk as PageWalk,
)
from toolkit.store.results import (
    ProgressCallback as ProgressCallback,
)
from toolkit.store.results import (
    RebuildRefused as RebuildRefused,
)
from toolkit.store.results import (
    ResourceSync as ResourceSync,
)
from toolkit.store.results import (
    StoreDamaged as StoreDamaged,
)
from toolkit.store.results import (
    StoreError as StoreError,
)
from toolkit.store.results import (
    StoreLinked as StoreLinked,
)
from toolkit.store.results import (
    StoreWriteError as StoreWriteError,
)
from toolkit.store.results import (
    SyncFailed as SyncFailed,
)
from toolkit.store.results import (
    SyncSummary as SyncSummary,
)
from toolkit.store.results import (
    one_line as one_line,
)

__all__ = [
    "DEFAULT_STORE",
    "MOCK_STORE",
    "PAGE_SIZE",
    "STORE_FORMAT",
    "STORE_KIND",
    "ChangeResult",
    "Deployment",
    "FileProblem",
    "ManifestDamaged",
    "NotAStore",
    "PageProgress",
    "PageSource",
    "PageWalk",
    "RebuildRefused",
    "ResourceSync",
    "StoreDamaged",
    "StoreError",
    "StoreLinked",
    "StoreWriteError",
    "SyncFailed",
    "SyncProgress",
    "SyncSummary",
    "VerifyReport",
    "WrongDeployment",
    "apply_changes",
    "check_folder",
    "declared_schemas",
    "default_store",
    "delete",
    "deployment_of",
    "load",
    "one_line",
    "read_manifest",
    "schema_version",
    "sync",
    "upsert",
    "verify",
]
