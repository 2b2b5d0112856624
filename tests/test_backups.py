"""Backups for real, on SQLite and MariaDB: a populated service (users with $2y$ and bcrypt hashes,
sessions, refresh tokens, a TOTP factor, rows under row policies, storage objects with metadata,
audit entries) backed up with `flask backup create`, restored with `flask backup restore` into a
fresh database and STORAGE_ROOT; then every user signs in, a refresh token taken before the backup
refreshes, every row and object is byte-exact. A non-empty target, a damaged or truncated archive
are refused, and nothing is written."""

import hashlib
import json
import os
import time
import uuid
import zipfile
from pathlib import Path

import bcrypt
import boto3
import pyotp
import pytest
import sqlalchemy as sa

from backups import archive, make
from extensions import db
from support import Api, free_port

TABLES = """
[tables.notes]
select = "owner"
insert = "owner"
update = "owner"
delete = "owner"
owner_column = "user_id"

[tables.notes.policies]
select = "body <> 'hidden'"

[buckets.files]
select = "owner"
insert = "authenticated"
update = "owner"
delete = "owner"
"""
NOTES = {
    "sqlite": "CREATE TABLE notes (id INTEGER PRIMARY KEY AUTOINCREMENT, user_id INTEGER, body TEXT, "
    "price DECIMAL(10,2), seen DATETIME, data BLOB, score REAL, flags INTEGER, "
    "twice TEXT GENERATED ALWAYS AS (body || body) VIRTUAL)",
    "mysql": "CREATE TABLE notes (id INTEGER PRIMARY KEY AUTO_INCREMENT, user_id INTEGER, body TEXT, "
    "price DECIMAL(10,2), seen DATETIME(6), data BLOB, score DOUBLE, flags BIT(5), "
    "twice TEXT AS (CONCAT(body, body)) VIRTUAL) ENGINE=InnoDB",
}
# What another application keeps beside its tables: views (one reading the other, whose name sorts
# after it), a trigger, and on MySQL a function.
SCHEMA = {
    "sqlite": [
        "CREATE TABLE counters (n INTEGER NOT NULL)",
        "INSERT INTO counters VALUES (0)",
        "CREATE VIEW note_bodies AS SELECT id, body FROM notes",
        "CREATE VIEW a_ids AS SELECT id FROM note_bodies",
        "CREATE TRIGGER notes_counted AFTER INSERT ON notes BEGIN UPDATE counters SET n = n + 1; END",
    ],
    "mysql": [
        "CREATE TABLE counters (n INTEGER NOT NULL, PRIMARY KEY (n)) ENGINE=InnoDB",
        "INSERT INTO counters VALUES (0)",
        "CREATE VIEW note_bodies AS SELECT id, body FROM notes",
        "CREATE VIEW a_ids AS SELECT id FROM note_bodies",
        "CREATE TRIGGER notes_counted AFTER INSERT ON notes FOR EACH ROW UPDATE counters SET n = n + 1",
        "CREATE FUNCTION twice_of(x INTEGER) RETURNS INTEGER DETERMINISTIC RETURN x * 2",
    ],
}
PASSWORDS = {
    "ann@example.com": "ann-password",
    "bob@example.com": "bob-password",
    "php@example.com": "php-pw",
}


def php_hash(password):
    """What PHP's password_hash() stores: bcrypt with the $2y$ prefix."""
    return "$2y$" + bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()[4:]


class Service:
    """A populated service: its app, an anon client, and what the tests check it against."""

    def __init__(self, make_app, database_url, backend, tmp_path, anon_key, **settings):
        engine = sa.create_engine(database_url)
        with engine.begin() as connection:
            connection.execute(sa.text(NOTES[backend]))
            for statement in SCHEMA[backend]:
                connection.exec_driver_sql(statement)
        engine.dispose()
        (tmp_path / "tables.toml").write_text(TABLES)
        self.tables = str(tmp_path / "tables.toml")
        self.root = tmp_path / "storage"
        self.app = make_app(TABLES_CONFIG=self.tables, STORAGE_ROOT=str(self.root), **settings)
        self.api = Api(self.app, anon_key)
        self.anon_key = anon_key

    def populate(self):
        api = self.api
        tokens = self.tokens = {}
        for email, password in PASSWORDS.items():
            tokens[email] = api.sign_up(email, password)["access_token"]
        with self.app.app_context():  # the PHP application's user: a $2y$ hash; a row of another writer
            db.session.execute(
                sa.text("UPDATE users SET password = :p WHERE email = 'php@example.com'"),
                {"p": php_hash(PASSWORDS["php@example.com"])},
            )
            odd = [
                {"b": 'it\'s \\ "odd"\n\x00 ✓', "d": bytes(range(256)), "s": 0.1 + 0.2},
                {"b": "", "d": b"", "s": -1e-300},
            ]
            db.session.execute(
                sa.text("INSERT INTO notes (body, data, score, flags) VALUES (:b, :d, :s, 5)"), odd
            )
            db.session.commit()
        assert api.sign_in("ann@example.com", "wrong").status_code == 400  # an audit entry
        self.refresh = api.sign_in("ann@example.com", "ann-password").json["refresh_token"]
        factor = api.post(
            "/auth/v1/factors", token=tokens["bob@example.com"], json={"factor_type": "totp"}
        ).json
        self.factor, self.totp = factor["id"], factor["totp"]["secret"]
        for email, body in [
            ("ann@example.com", "first"),
            ("ann@example.com", "hidden"),
            ("bob@example.com", "b"),
        ]:
            row = {"body": body, "price": "12.50", "seen": "2024-05-06T07:08:09.123456", "data": None}
            assert api.post("/rest/v1/notes", token=tokens[email], json=row).status_code == 201
        self.files = {
            "ann/a.txt": b"hello, ann",
            "ann/photo.bin": os.urandom(70_000),
            "bob/b.txt": "bøb ✓".encode(),
        }
        for name, data in self.files.items():
            owner = "ann@example.com" if name.startswith("ann") else "bob@example.com"
            answer = api.post(
                f"/storage/v1/object/files/{name}",
                token=tokens[owner],
                data=data,
                headers={"Content-Type": "application/octet-stream", "x-metadata": "eyJrIjoidiJ9"},
            )
            assert answer.status_code == 200, answer.json
        # One replaced (its first bytes deleted) and one removed: neither is in the archive.
        self.files["ann/a.txt"] = b"hello again, ann"
        self.replace_ann_a_txt(self.files["ann/a.txt"])
        api.post("/storage/v1/object/files/ann/gone.txt", token=tokens["ann@example.com"], data=b"x")
        api.delete(
            "/storage/v1/object/files", token=tokens["ann@example.com"], json={"prefixes": ["ann/gone.txt"]}
        )
        return self

    def replace_ann_a_txt(self, data):
        """Upload `data` over ann/a.txt, as ann (x-upsert): its earlier bytes are deleted."""
        answer = self.api.post(
            "/storage/v1/object/files/ann/a.txt",
            token=self.tokens["ann@example.com"],
            data=data,
            headers={"Content-Type": "text/plain", "x-upsert": "true"},
        )
        assert answer.status_code == 200

    def cli(self, *args, app=None):
        return (app or self.app).test_cli_runner().invoke(args=list(args))


@pytest.fixture
def service(make_app, database_url, backend, tmp_path, anon_key):
    return Service(make_app, database_url, backend, tmp_path, anon_key).populate()


def rows(url):
    """Every table's rows, as the driver reads them, in a stable order: {table: sorted rows}."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as connection:
            taken = {}
            for table in sa.inspect(connection).get_table_names():
                quoted = connection.dialect.identifier_preparer.quote(table)
                found = connection.exec_driver_sql(f"SELECT * FROM {quoted}").all()
                taken[table] = sorted((tuple(row) for row in found), key=repr)
            return taken
    finally:
        engine.dispose()


def stored_files(root):
    """{key: bytes} of every object and upload part under a STORAGE_ROOT."""
    found = {}
    for area in ("objects", "uploads"):
        for path in Path(root, area).glob("*/*"):
            found[f"{area}/{path.name}"] = path.read_bytes()
    return found


def create(service, where):
    answer = service.cli("backup", "create", "--to", str(where))
    assert answer.exit_code == 0, answer.output
    (made,) = archive.NAME.finditer(answer.output)
    return Path(where) / made[0]


def restore_into(service, make_app, url, root, path, *flags, migrated=False):
    """`flask backup restore` on a service over `url` and `root`: a database with no table at all, or
    (`migrated`) one its first start migrated."""
    target = make_app(DATABASE_URL=url, STORAGE_ROOT=str(root), AUTO_MIGRATE=migrated)
    return service.cli("backup", "restore", str(path), *flags, app=target)


def test_a_round_trip_keeps_every_user_session_row_and_object(
    service, make_app, database_url, other_database_url, tmp_path
):
    path = create(service, tmp_path / "archives")
    before, files_before = rows(database_url), stored_files(service.root)
    assert before["notes"] and before["minibase_audit_log"] and before["minibase_mfa_factors"]
    assert len(files_before) == 3  # the replaced and the removed object's bytes are gone

    answer = restore_into(service, make_app, other_database_url, tmp_path / "restored", path, migrated=True)
    assert answer.exit_code == 0, answer.output
    assert "warning" not in answer.output

    assert rows(other_database_url) == before
    engine = sa.create_engine(other_database_url)
    with engine.connect() as connection:
        found = connection.execute(
            sa.text("SELECT data, score, body, twice FROM notes WHERE data IS NOT NULL")
        )
        odd = sorted(found.all(), key=repr)
    engine.dispose()
    assert [(data, score, twice == body * 2) for data, score, body, twice in odd] == sorted(
        [(bytes(range(256)), 0.1 + 0.2, True), (b"", -1e-300, True)], key=repr
    )
    with engine.begin() as connection:  # the views read, the trigger counted before and counts again
        assert len(connection.execute(sa.text("SELECT * FROM a_ids")).all()) == len(before["notes"])
        assert connection.execute(sa.text("SELECT n FROM counters")).scalar() == len(before["notes"])
        connection.execute(sa.text("INSERT INTO notes (body) VALUES ('after')"))
        assert connection.execute(sa.text("SELECT n FROM counters")).scalar() == len(before["notes"]) + 1
        if connection.dialect.name == "mysql":
            assert connection.execute(sa.text("SELECT twice_of(21)")).scalar() == 42
    engine.dispose()
    assert stored_files(tmp_path / "restored") == files_before
    restored = make_app(
        DATABASE_URL=other_database_url, TABLES_CONFIG=service.tables, STORAGE_ROOT=str(tmp_path / "restored")
    )
    api = Api(restored, service.anon_key)
    assert api.get("/health").status_code == 200
    ready = api.get("/ready")  # the database answers and is at the migrations' head
    assert ready.status_code == 200, ready.json
    for email, password in PASSWORDS.items():
        assert api.sign_in(email, password).status_code == 200, email
    refreshed = api.post("/auth/v1/token?grant_type=refresh_token", json={"refresh_token": service.refresh})
    assert refreshed.status_code == 200, refreshed.json
    token = refreshed.json["access_token"]
    assert [note["body"] for note in api.get("/rest/v1/notes", token=token).json] == ["first"]
    for name, data in service.files.items():
        owner = service.tokens["ann@example.com"] if name.startswith("ann") else None
        if owner is None:
            owner = api.sign_in("bob@example.com", "bob-password").json["access_token"]
        if name.startswith("ann"):
            owner = token
        answer = api.get(f"/storage/v1/object/files/{name}", token=owner, buffered=True)
        assert answer.status_code == 200 and answer.data == data, name
    # Bob's factor was sealed with the same secret: a code from his authenticator still verifies.
    bob = api.sign_in("bob@example.com", "bob-password").json["access_token"]
    challenge = api.post(f"/auth/v1/factors/{service.factor}/challenge", token=bob).json["id"]
    body = {"challenge_id": challenge, "code": pyotp.TOTP(service.totp).now()}
    assert api.post(f"/auth/v1/factors/{service.factor}/verify", token=bob, json=body).status_code == 200


def test_the_manifest_names_every_member_with_its_checksum(service, tmp_path):
    path = create(service, tmp_path / "archives")
    with zipfile.ZipFile(path) as opened:
        manifest = archive.verified(path).manifest
        assert manifest["format"] == "minibase-backup" and manifest["version"] == 1
        assert manifest["migration"] and manifest["objects"] == 3
        assert set(opened.namelist()) == {"manifest.json", *manifest["files"]}
        for name, entry in manifest["files"].items():
            data = opened.read(name)
            assert entry == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    listed = service.cli("backup", "list", "--at", str(tmp_path / "archives"))
    assert listed.exit_code == 0 and path.name in listed.output
    service.app.config["BACKUP_TO"] = str(tmp_path / "archives")
    missing = service.cli("backup", "restore", "minibase-20990101T000000Z-abcdef.zip", "--force")
    assert missing.exit_code != 0 and "no archive minibase-20990101T000000Z-abcdef.zip in" in missing.output


def test_a_non_empty_target_is_refused_unless_forced(service, make_app, other_database_url, tmp_path):
    path = create(service, tmp_path / "archives")
    before = rows(service.app.config["DATABASE_URL"])
    answer = service.cli("backup", "restore", str(path))  # into the populated service itself
    assert answer.exit_code != 0 and "not empty" in answer.output and "rows in users" in answer.output
    # A target whose storage alone holds an object is refused too.
    stray = tmp_path / "stray" / "objects" / "ab"
    stray.mkdir(parents=True)
    (stray / ("ab" + "0" * 30)).write_bytes(b"stray")
    answer = restore_into(service, make_app, other_database_url, tmp_path / "stray", path)
    assert answer.exit_code != 0 and "objects in the storage" in answer.output
    assert rows(service.app.config["DATABASE_URL"]) == before
    # With --force, the stray object goes and the archive's service is there.
    answer = restore_into(service, make_app, other_database_url, tmp_path / "stray", path, "--force")
    assert answer.exit_code == 0, answer.output
    assert stored_files(tmp_path / "stray") == stored_files(service.root)
    assert rows(other_database_url) == before


def damaged(path, how):
    data = bytearray(path.read_bytes())
    if how == "truncated":
        data = data[: len(data) // 2]
    elif how == "flipped":  # one byte of an object's stored bytes
        with zipfile.ZipFile(path) as opened:
            info = opened.getinfo(next(name for name in opened.namelist() if name.startswith("objects/")))
        data[info.header_offset + 30 + len(info.filename) + len(info.extra) + 3] ^= 0xFF
    elif how in ("manifest", "foreign"):
        with zipfile.ZipFile(path) as opened:
            members = {name: opened.read(name) for name in opened.namelist()}
        manifest = json.loads(members["manifest.json"])
        if how == "manifest":
            next(iter(manifest["files"].values()))["size"] += 1
        else:  # a member named to climb out of STORAGE_ROOT, with its right checksum
            name, evil = "objects/../../../evil", b"evil"
            members[name] = evil
            manifest["files"][name] = {"size": len(evil), "sha256": hashlib.sha256(evil).hexdigest()}
        members["manifest.json"] = json.dumps(manifest).encode()
        with zipfile.ZipFile(path, "w") as rewritten:
            for name, member in members.items():
                rewritten.writestr(name, member)
        return
    path.write_bytes(bytes(data))


def test_a_damaged_archive_is_refused_and_nothing_is_written(service, make_app, other_database_url, tmp_path):
    path = create(service, tmp_path / "archives")
    for how in ("truncated", "flipped", "manifest", "foreign"):
        copy = tmp_path / how / path.name
        copy.parent.mkdir()
        copy.write_bytes(path.read_bytes())
        damaged(copy, how)
        answer = restore_into(service, make_app, other_database_url, tmp_path / "restored", copy)
        assert answer.exit_code != 0, how
        said = {
            "truncated": "truncated",
            "flipped": "damaged",
            "manifest": "damaged",
            "foreign": "not one minibase",
        }
        assert said[how] in answer.output, answer.output
        assert "Traceback" not in answer.output
        assert rows(other_database_url) == {}  # not a table made
        assert stored_files(tmp_path / "restored") == {}


def test_an_archive_of_the_other_database_kind_or_a_later_migration_is_refused(service, tmp_path):
    path = create(service, tmp_path / "archives")
    with zipfile.ZipFile(path) as opened:
        members = {name: opened.read(name) for name in opened.namelist()}
    manifest = members["manifest.json"].replace(b'"migration": "', b'"migration": "9', 1)
    members["manifest.json"] = manifest
    with zipfile.ZipFile(path, "w") as rewritten:
        for name, member in members.items():
            rewritten.writestr(name, member)
    with service.app.app_context():
        verified = archive.verified(path)
        with pytest.raises(archive.BackupError, match="does not know"):
            from backups import restore

            restore.check_fits(verified)
        verified.close()


def test_backup_keep_prunes_the_oldest(service, tmp_path):
    where = tmp_path / "archives"
    where.mkdir()
    for stamp in ("20200101T000000Z", "20210101T000000Z"):
        (where / f"minibase-{stamp}-abcdef.zip").write_bytes(b"old")
    (where / "notes.txt").write_text("not an archive")
    with service.app.app_context():
        service.app.config["BACKUP_KEEP"] = 2
        made = make.create(str(where))
        assert make.prune(str(where)) == ["minibase-20200101T000000Z-abcdef.zip"]
        assert [listed.name for listed in make.listing(str(where))] == [
            made.name,
            "minibase-20210101T000000Z-abcdef.zip",
        ]
    assert (where / "notes.txt").exists()


def test_an_object_replaced_between_the_snapshot_and_its_bytes_is_taken_again(
    service, make_app, other_database_url, tmp_path, monkeypatch
):
    """The race made to happen: right after the first snapshot, ann's file is replaced (its old
    bytes deleted). The archive holds the second snapshot and the new bytes, no row without them."""
    secure, taken = make.secure, []

    def then_replaced(backend, keys, held, work):
        taken.append(set(keys))
        if len(taken) == 1:
            service.replace_ann_a_txt(b"replaced meanwhile")
        return secure(backend, keys, held, work)

    monkeypatch.setattr(make, "secure", then_replaced)
    with service.app.app_context():
        made = make.create(str(tmp_path / "archives"))
    assert made.attempts == 2 and len(taken) == 2
    assert taken[0] - taken[1]  # the first snapshot named bytes that were deleted
    answer = restore_into(
        service, make_app, other_database_url, tmp_path / "restored", tmp_path / "archives" / made.name
    )
    assert answer.exit_code == 0, answer.output
    assert_consistent(other_database_url, tmp_path / "restored")
    restored = Api(make_app(DATABASE_URL=other_database_url, TABLES_CONFIG=service.tables,
                            STORAGE_ROOT=str(tmp_path / "restored")), service.anon_key)  # fmt: skip
    token = restored.sign_in("ann@example.com", "ann-password").json["access_token"]
    answer = restored.get("/storage/v1/object/files/ann/a.txt", token=token, buffered=True)
    assert answer.data == b"replaced meanwhile"


def test_after_two_lost_snapshots_the_next_holds_replacing_uploads_back(
    service, database_url, tmp_path, monkeypatch
):
    """On MySQL, the third snapshot holds the storage rows until its bytes are read: a write to an
    object's row meanwhile waits (here it gives up after 1 s), where the first two let it through."""
    if not database_url.startswith("mysql"):
        pytest.skip("SQLite's snapshot is one read of the whole file")
    import pymysql

    from backups import mysql

    secure, refused = make.secure, []

    def then_written(backend, keys, held, work):
        writer = mysql.connect(database_url)
        try:
            with writer.cursor() as cursor:
                cursor.execute("SET SESSION innodb_lock_wait_timeout = 1")
                try:
                    cursor.execute("UPDATE minibase_storage_objects SET updated_at = updated_at "
                                   "WHERE name = 'ann/a.txt'")  # fmt: skip
                    refused.append(None)
                except pymysql.err.OperationalError as exc:
                    refused.append(exc.args[0])
        finally:
            writer.rollback()
            writer.close()
        if len(refused) <= make.HOLD_AFTER:  # replaced, as a busy service would: this snapshot lost
            service.replace_ann_a_txt(f"replaced {len(refused)}".encode())
        return secure(backend, keys, held, work)

    monkeypatch.setattr(make, "secure", then_written)
    with service.app.app_context():
        made = make.create(str(tmp_path / "archives"))
    assert made.attempts == make.HOLD_AFTER + 1
    assert refused == [None] * make.HOLD_AFTER + [1205]  # ER_LOCK_WAIT_TIMEOUT: held


def assert_consistent(url, root):
    """Every object row's bytes are in `root` with its size and md5, and no bytes lack a row."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as connection:
            objects = connection.execute(
                sa.text("SELECT storage_key, size, etag FROM minibase_storage_objects")
            ).all()
    finally:
        engine.dispose()
    files = stored_files(root)
    assert {f"objects/{key}" for key, _, _ in objects} == {
        name for name in files if name.startswith("objects/")
    }
    for key, size, etag in objects:
        data = files[f"objects/{key}"]
        assert len(data) == size and hashlib.md5(data).hexdigest() == etag
    return len(objects)


@pytest.fixture(scope="module")
def s3_endpoint():
    moto_server = pytest.importorskip("moto.server")
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.mark.parametrize("backend", ["sqlite"])  # the databases' part is the same as on a disk
def test_a_round_trip_through_s3(
    make_app, database_url, other_database_url, backend, tmp_path, anon_key, s3_endpoint
):
    """Objects in one S3 bucket, archives in another, restored into a third."""
    client = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1",
                          aws_access_key_id="test", aws_secret_access_key="test")  # fmt: skip
    names = {part: f"{part}-{uuid.uuid4().hex[:12]}" for part in ("source", "archives", "restored")}
    for name in names.values():
        client.create_bucket(Bucket=name)
    s3 = {"STORAGE_BACKEND": "s3", "S3_ENDPOINT": s3_endpoint, "S3_ACCESS_KEY_ID": "test",
          "S3_SECRET_ACCESS_KEY": "test"}  # fmt: skip
    service = Service(make_app, database_url, backend, tmp_path, anon_key, S3_BUCKET=names["source"], **s3)
    service.populate()
    where = f"s3://{names['archives']}/nightly"
    answer = service.cli("backup", "create", "--to", where)
    assert answer.exit_code == 0, answer.output
    (name,) = [match[0] for match in archive.NAME.finditer(answer.output)]
    listed = client.list_objects_v2(Bucket=names["archives"])["Contents"]
    assert [item["Key"] for item in listed] == [f"nightly/{name}"]
    assert name in service.cli("backup", "list", "--at", where).output

    target = make_app(DATABASE_URL=other_database_url, STORAGE_ROOT=str(tmp_path / "local"),
                      S3_BUCKET=names["restored"], **s3)  # fmt: skip
    answer = service.cli("backup", "restore", f"{where}/{name}", app=target)
    assert answer.exit_code == 0, answer.output

    def stored(bucket):
        found = client.list_objects_v2(Bucket=bucket).get("Contents", [])
        return {
            item["Key"]: client.get_object(Bucket=bucket, Key=item["Key"])["Body"].read() for item in found
        }

    assert stored(names["restored"]) == stored(names["source"]) and len(stored(names["source"])) == 3
    assert rows(other_database_url) == rows(database_url)
    settings = {"TABLES_CONFIG": service.tables, "STORAGE_ROOT": str(tmp_path / "local"), **s3}
    restored = Api(
        make_app(DATABASE_URL=other_database_url, S3_BUCKET=names["restored"], **settings), anon_key
    )
    token = restored.sign_in("bob@example.com", "bob-password").json["access_token"]
    answer = restored.get("/storage/v1/object/files/bob/b.txt", token=token, buffered=True)
    assert answer.data == service.files["bob/b.txt"]
    client.close()


@pytest.mark.slow
def test_a_backup_under_write_load_restores_with_no_row_without_bytes(
    service, make_app, other_database_url, tmp_path
):
    """20 writers (uploads of new names, overwrites of five hot ones, deletions, rows) while two
    archives are made; the second restores with every object row's bytes and no bytes without a row."""
    import random
    import threading

    import requests

    from support import serve_app

    base, stop = serve_app(service.app, threads=8)
    token = service.tokens["ann@example.com"]
    headers = {"apikey": service.anon_key, "Authorization": f"Bearer {token}"}
    running, done, failures = threading.Event(), [], []
    running.set()

    def write(http, number, count, mine):
        kind = random.random()
        body = os.urandom(random.randint(1, 20_000))
        if kind < 0.35:
            mine.append(f"ann/w{number}/{count}.bin")
            return http.post(f"{base}/storage/v1/object/files/{mine[-1]}", data=body)
        if kind < 0.7:
            name = f"ann/hot/{random.randrange(5)}.bin"
            return http.post(
                f"{base}/storage/v1/object/files/{name}", data=body, headers={"x-upsert": "true"}
            )
        if kind < 0.85 and mine:
            return http.delete(f"{base}/storage/v1/object/files", json={"prefixes": [mine.pop(0)]})
        return http.post(f"{base}/rest/v1/notes", json={"body": f"w{number}-{count}"})

    def writer(number):
        http, mine, count = requests.Session(), [], 0
        http.headers.update(headers)
        while running.is_set():
            try:
                answer = write(http, number, count, mine)
                if answer.status_code >= 500:
                    failures.append(answer.status_code)
            except requests.RequestException as exc:
                failures.append(repr(exc))
            count += 1
            # The writers share this process's GIL with the backup, as clients elsewhere would not:
            # without a pause, 28 threads starve it until every snapshot's hot objects are replaced.
            time.sleep(0.002)
        done.append(count)

    writers = [threading.Thread(target=writer, args=(number,)) for number in range(20)]
    for thread in writers:
        thread.start()
    made = []
    try:
        with service.app.app_context():
            for _ in range(2):
                time.sleep(1)
                made.append(make.create(str(tmp_path / "archives")))
    finally:
        running.clear()
        for thread in writers:
            thread.join()
        stop()
    assert not failures, failures[:5]
    print(f"writes: {sum(done)}; snapshots per archive: {[m.attempts for m in made]}; "
          f"objects: {[m.objects for m in made]}")  # fmt: skip
    archived = made[-1]
    path = tmp_path / "archives" / archived.name
    answer = restore_into(service, make_app, other_database_url, tmp_path / "restored", path)
    assert answer.exit_code == 0, answer.output
    assert assert_consistent(other_database_url, tmp_path / "restored") == archived.objects > 3


def test_backup_schedule_makes_and_prunes_through_the_schedules(make_app, tmp_path):
    """BACKUP_SCHEDULE is a schedule named `backup`: each run makes an archive and keeps BACKUP_KEEP;
    a line that is not cron stops the start."""
    import variables

    where = tmp_path / "archives"
    app = make_app(BACKUP_SCHEDULE="0 3 * * *", BACKUP_TO=str(where), BACKUP_KEEP=1)
    listed = app.test_cli_runner().invoke(args=["schedules", "list"])
    assert "backup  0 3 * * *" in listed.output
    for _ in range(2):
        answer = app.test_cli_runner().invoke(args=["schedules", "run", "backup"])
        assert answer.exit_code == 0 and "backup: succeeded" in answer.output, answer.output
    assert len(list(where.glob("minibase-*.zip"))) == 1  # the first pruned by the second run
    with pytest.raises(variables.ConfigError, match="BACKUP_SCHEDULE"):
        make_app(BACKUP_SCHEDULE="at three")


def test_a_database_that_fails_to_restore_leaves_nothing(
    service, make_app, other_database_url, backend, tmp_path
):
    """An archive whose checksums are right but whose database the target refuses part-way (a row for
    a table that is not there; a SQLite file that is not a database): the rows made are gone, the
    tables too, and the bytes placed before are removed."""
    path = create(service, tmp_path / "archives")
    with zipfile.ZipFile(path) as opened:
        members = {name: opened.read(name) for name in opened.namelist()}
    manifest = json.loads(members["manifest.json"])
    member = archive.DATABASE_MEMBERS[backend]
    if backend == "mysql":
        bad = {"kind": "rows", "name": "nope", "sql": "INSERT INTO nope VALUES (1)"}
        members[member] += (json.dumps(bad) + "\n").encode()
    else:
        members[member] = b"not a database" * 100
    manifest["files"][member] = {
        "size": len(members[member]),
        "sha256": hashlib.sha256(members[member]).hexdigest(),
    }
    members["manifest.json"] = json.dumps(manifest).encode()
    with zipfile.ZipFile(path, "w") as rewritten:
        for name, data in members.items():
            rewritten.writestr(name, data)
    answer = restore_into(service, make_app, other_database_url, tmp_path / "restored", path, migrated=True)
    assert answer.exit_code != 0 and "Traceback" not in answer.output, answer.output
    assert "the database failed" in answer.output or "not a database" in answer.output, answer.output
    left = rows(other_database_url)
    assert not left.get("users") and not left.get("notes") and not left.get("minibase_storage_objects")
    assert stored_files(tmp_path / "restored") == {}
