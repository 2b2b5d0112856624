"""An embedded read's response, byte for byte, over every kind of column (integers, floats,
decimals, booleans, dates, times, text with escapes and non-ASCII, JSON, binary, NULL), to-one
and to-many, nested, `!inner`, spread, counted, ordered and limited inside the embed, under a row
policy and a column list on the embedded tables; on both databases. The expected bodies are the
bytes the service answered before its embeds were read faster: any change to how embeds are read,
shaped or encoded must answer exactly these."""

import json
from datetime import date, datetime, time
from decimal import Decimal

import orjson
import pytest
import sqlalchemy as sa

import blueprints.rest
import encoding
from support import Api

TABLES = """
[tables.b_owners]
select = "anon"
columns = ["id", "name", "score", "balance", "active", "born", "seen", "data", "raw", "big", "alarm"]

[tables.b_items]
select = "anon"

[tables.b_tags]
select = "anon"

[tables.b_tags.policies]
select = "hidden = 0"

[tables.b_notes]
select = "anon"
"""

metadata = sa.MetaData()
owners = sa.Table(
    "b_owners",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("name", sa.String(40)),
    sa.Column("score", sa.Double),
    sa.Column("balance", sa.Numeric(12, 3)),
    sa.Column("active", sa.Boolean),
    sa.Column("born", sa.Date),
    sa.Column("seen", sa.DateTime),
    sa.Column("data", sa.JSON),
    sa.Column("raw", sa.LargeBinary),
    sa.Column("big", sa.BigInteger),
    sa.Column("alarm", sa.Time),
    sa.Column("secret", sa.String(40)),
)
items = sa.Table(
    "b_items",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("owner_id", sa.Integer, sa.ForeignKey("b_owners.id"), nullable=True),
    sa.Column("title", sa.String(60)),
    sa.Column("price", sa.Double),
    sa.Column("flag", sa.Boolean),
)
tags = sa.Table(
    "b_tags",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("item_id", sa.Integer, sa.ForeignKey("b_items.id"), nullable=False),
    sa.Column("label", sa.String(40)),
    sa.Column("weight", sa.Double),
    sa.Column("ok", sa.Boolean),
    sa.Column("day", sa.Date),
    sa.Column("meta", sa.JSON),
    sa.Column("bits", sa.LargeBinary),
    sa.Column("amount", sa.Numeric(10, 2)),
    sa.Column("hidden", sa.Integer, nullable=False),
)
notes = sa.Table(  # text, integers and nulls only: every read of it is plain_json's
    "b_notes",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("item_id", sa.Integer, sa.ForeignKey("b_items.id"), nullable=False),
    sa.Column("body", sa.String(60)),
)

OWNERS = [
    {"id": 1, "name": "Zoë ☃ \U0001d11e", "score": 1e-05, "balance": Decimal("12.500"), "active": True,
     "born": date(1990, 1, 31), "seen": datetime(2024, 5, 6, 7, 8, 9), "raw": b"\x00\xffab",
     "data": {"n": 0.1, "big": 1e16, "s": "é\u2028", "list": [1, None, True]}, "big": 2**62,
     "alarm": time(6, 30), "secret": "never shown"},
    {"id": 2, "name": 'quote " back \\ tab\t nl\n ctl\x01 del\x7f', "score": -123.456,
     "balance": Decimal("0.125"), "active": False, "born": None, "seen": None, "data": [],
     "raw": None, "big": -(2**40), "alarm": None, "secret": "no"},
    {"id": 3, "name": None, "score": None, "balance": None, "active": None, "born": None, "seen": None,
     "data": None, "raw": None, "big": None, "alarm": None, "secret": None},
]  # fmt: skip
ITEMS = [
    {"id": 1, "owner_id": 1, "title": "first", "price": 2.5, "flag": True},
    {"id": 2, "owner_id": 2, "title": "sécond", "price": 1e16, "flag": False},
    {"id": 3, "owner_id": None, "title": "orphan", "price": None, "flag": None},
    {"id": 4, "owner_id": 1, "title": "fourth", "price": 0.1, "flag": True},
    {"id": 5, "owner_id": 3, "title": "fifth", "price": 3.0, "flag": False},
]
TAGS = [
    {"id": 1, "item_id": 1, "label": "red", "weight": 0.5, "ok": True, "day": date(2024, 1, 1),
     "meta": {"k": "v"}, "bits": b"\x01", "amount": Decimal("1.50"), "hidden": 0},
    {"id": 2, "item_id": 1, "label": "blue ✓", "weight": 2.5e-07, "ok": False, "day": None,
     "meta": [1, 2.5], "bits": None, "amount": Decimal("-3.00"), "hidden": 0},
    {"id": 3, "item_id": 1, "label": "hidden one", "weight": 1.0, "ok": True, "day": None,
     "meta": None, "bits": None, "amount": None, "hidden": 1},
    {"id": 4, "item_id": 2, "label": "green", "weight": None, "ok": None, "day": date(2023, 12, 31),
     "meta": "text", "bits": b"", "amount": Decimal("99999999.99"), "hidden": 0},
    {"id": 5, "item_id": 4, "label": "a", "weight": 100.0, "ok": True, "day": None, "meta": None,
     "bits": None, "amount": None, "hidden": 0},
    {"id": 6, "item_id": 4, "label": "b", "weight": 1e300, "ok": False, "day": None, "meta": None,
     "bits": None, "amount": None, "hidden": 0},
    {"id": 7, "item_id": 4, "label": "c", "weight": -0.0, "ok": None, "day": None, "meta": None,
     "bits": None, "amount": None, "hidden": 0},
    {"id": 8, "item_id": 5, "label": "only hidden", "weight": None, "ok": None, "day": None,
     "meta": None, "bits": None, "amount": None, "hidden": 1},
]  # fmt: skip
NOTES = [
    {"id": 1, "item_id": 1, "body": "check the price"},
    {"id": 2, "item_id": 1, "body": None},
    {"id": 3, "item_id": 2, "body": "déjà vu"},
]

READS = [
    "b_items?select=*,b_owners(*),b_tags(*)&order=id",
    "b_items?select=id,owner:b_owners(name,score,active),tags:b_tags(label,weight,ok)&order=id.desc",
    "b_owners?select=id,name,b_items(id,title,price,b_tags(label,amount,bits))&order=id",
    "b_tags?select=id,label,b_items(title,flag,b_owners(name,balance,seen,alarm))&order=id",
    "b_items?select=id,b_tags!inner(label)&b_tags.label=in.(red,green,b)&order=id",
    "b_items?select=id,b_tags(label,day)&b_tags.order=id.desc&b_tags.limit=2&order=id",
    "b_items?select=id,b_tags(label)&b_tags.order=label.asc&b_tags.offset=1&order=id",
    "b_items?select=id,...b_owners(name,data),b_tags(count)&order=id",
    "b_items?select=id,b_owners!inner(name)&b_owners.active=is.true&order=id",
    "b_items?select=title,b_tags(*,b_items(title,b_owners(*)))&id=in.(1,4)&order=id",
    "b_owners?select=*,b_items(count)&order=id&limit=2&offset=1",
    "b_items?select=id,owner:b_owners(big,raw),b_tags(meta,amount)&owner_id=not.is.null&order=id",
]
# Reads whose values are all text, integers and nulls (encoded by encoding.plain_json), with
# characters past ASCII, DEL and control characters in them: (path, Accept header).
PLAIN_READS = [
    ("b_items?select=id,title,owner:b_owners(id,name),b_tags(label)&order=id", None),
    ("b_owners?select=name,b_items(title,b_tags(id,label))&order=id", None),
    ("b_items?select=title,b_tags(count),...b_owners(name)&order=id.desc", None),
    ("b_items?select=id,title,b_owners(name)&id=eq.2", "application/vnd.pgrst.object+json"),
    ("b_items?select=id,b_owners(name,id)&order=id", "application/vnd.pgrst.array+json;nulls=stripped"),
    ("b_items?select=id,b_tags(label)&id=gt.10", None),
    ("b_items?select=id,b_owners(name)&id=eq.2", None),  # ASCII but DEL
]


@pytest.fixture
def api(make_app, database_url, tmp_path, anon_key):
    engine = sa.create_engine(database_url)
    metadata.create_all(engine)
    with engine.begin() as connection:
        for table, rows in ((owners, OWNERS), (items, ITEMS), (tags, TAGS), (notes, NOTES)):
            connection.execute(table.insert(), rows)
    engine.dispose()
    config = tmp_path / "tables.toml"
    config.write_text(TABLES)
    return Api(make_app(TABLES_CONFIG=str(config)), anon_key)


def bodies(api):
    found = {}
    for path in READS:
        response = api.get(f"/rest/v1/{path}")
        assert response.status_code == 200, (path, response.get_data(as_text=True))
        found[path] = response.get_data()
    return found


@pytest.fixture
def encoded(monkeypatch):
    """The values the service encoded by encoding.plain_json, in order; see by_orjson."""
    calls = []

    def plain_json(value):
        calls.append(value)
        return encoding.plain_json(value)

    monkeypatch.setattr(blueprints.rest, "plain_json", plain_json)
    return calls


def by_orjson(value):
    """Whether orjson writes `value` itself: plain_json hands what it refuses to json, ~10x slower,
    with the same bytes (a dict key that is a subclass of str, such as a reflected column's name)."""
    try:
        orjson.dumps(value)
    except orjson.JSONEncodeError:
        return False
    return True


def test_embedded_reads_answer_the_same_bytes(api):
    found = bodies(api)
    for path, expected in zip(READS, EXPECTED, strict=True):
        assert found[path] == expected, path


def test_plain_reads_answer_the_same_bytes_by_the_faster_encoder(api, encoded):
    for (path, accept), expected in zip(PLAIN_READS, PLAIN_EXPECTED, strict=True):
        response = api.get(f"/rest/v1/{path}", headers={"Accept": accept} if accept else {})
        assert response.status_code == 200, (path, response.get_data(as_text=True))
        assert response.get_data() == expected, path
    assert len(encoded) == len(PLAIN_READS) and all(map(by_orjson, encoded))
    api.get(f"/rest/v1/{READS[0]}")  # floats, booleans, JSON, decimals: encoded by json
    assert len(encoded) == len(PLAIN_READS)


# Reads of one table, each value text, an integer, null or a float plain_json writes as json does.
TABLE_READS = [
    ("b_owners?select=id,name,big&order=id", None),
    ("b_items?select=id,title,price&order=id.desc", None),
    ("b_owners?select=name&id=eq.1", "application/vnd.pgrst.object+json"),
    ("b_owners?select=id,name&order=id", "application/vnd.pgrst.array+json;nulls=stripped"),
    ("b_tags?select=id,label&id=gt.100", None),
]


def test_reads_of_one_table_answer_json_s_bytes_by_the_faster_encoder(api, encoded):
    for path, accept in TABLE_READS:
        response = api.get(f"/rest/v1/{path}", headers={"Accept": accept} if accept else {})
        assert response.status_code == 200, (path, response.get_data(as_text=True))
        body = response.get_data()
        assert body == json.dumps(json.loads(body), separators=(",", ":")).encode(), path
    assert len(encoded) == len(TABLE_READS) and all(map(by_orjson, encoded))
    for path in ("b_owners?select=id,score", "b_owners?select=active", "b_tags?select=meta"):
        assert api.get(f"/rest/v1/{path}").status_code == 200  # 1e-05, booleans, JSON: json's own
    assert len(encoded) == len(TABLE_READS)


# Reads of every column (`*`, the default), the table's own and an embed's, all plain.
STAR_READS = [
    ("b_notes?order=id", None),
    ("b_notes?select=*&id=eq.3", "application/vnd.pgrst.object+json"),
    ("b_items?select=id,b_notes(*)&id=lte.2&order=id", None),
    ("b_notes?select=*,b_items(id,title)&order=id.desc", None),
]


def test_reads_of_every_column_are_written_by_orjson(api, encoded):
    """A reflected column's name is SQLAlchemy's quoted_name, which orjson does not take as a key:
    unless `*` gives each column's alias as a str, its rows go to json (the same bytes, slower)."""
    for path, accept in STAR_READS:
        response = api.get(f"/rest/v1/{path}", headers={"Accept": accept} if accept else {})
        assert response.status_code == 200, (path, response.get_data(as_text=True))
        body = response.get_data()
        assert body == json.dumps(json.loads(body), separators=(",", ":")).encode(), path
    assert json.loads(api.get("/rest/v1/b_notes?order=id").get_data()) == NOTES
    assert len(encoded) == len(STAR_READS) + 1 and all(map(by_orjson, encoded))


def test_a_hidden_child_row_and_an_unlisted_column_stay_out(api):
    """The row policy on b_tags hides its rows in every embed (the query asks for them no more),
    and b_owners' column list leaves `secret` out of `*`, and refuses it by name."""
    for body in bodies(api).values():
        assert b"hidden one" not in body and b"only hidden" not in body and b"never shown" not in body
    by_item = {row["id"]: row["b_tags"] for row in json.loads(bodies(api)[READS[0]])}
    assert [tag["label"] for tag in by_item[1]] == ["red", "blue ✓"]
    assert by_item[5] == []
    assert api.get("/rest/v1/b_items?select=id,b_owners(secret)").status_code == 400


# The same on both databases, in the order of READS.
EXPECTED = [
    (
        b'[{"id":1,"owner_id":1,"title":"first","price":2.5,"flag":true,"b_owners":{"id":1,"name":"Z'
        b'o\\u00eb \\u2603 \\ud834\\udd1e","score":1e-05,"balance":12.5,"active":true,"born":"1990-01-31'
        b'","seen":"2024-05-06T07:08:09","data":{"n":0.1,"big":1e+16,"s":"\\u00e9\\u2028","list":[1,nu'
        b'll,true]},"raw":"\\\\x00ff6162","big":4611686018427387904,"alarm":"06:30:00"},"b_tags":[{"id'
        b'":1,"item_id":1,"label":"red","weight":0.5,"ok":true,"day":"2024-01-01","meta":{"k":"v"},"'
        b'bits":"\\\\x01","amount":1.5,"hidden":0},{"id":2,"item_id":1,"label":"blue \\u2713","weight":'
        b'2.5e-07,"ok":false,"day":null,"meta":[1,2.5],"bits":null,"amount":-3.0,"hidden":0}]},{"id"'
        b':2,"owner_id":2,"title":"s\\u00e9cond","price":1e+16,"flag":false,"b_owners":{"id":2,"name"'
        b':"quote \\" back \\\\ tab\\t nl\\n ctl\\u0001 del\\u007f","score":-123.456,"balance":0.125,"activ'
        b'e":false,"born":null,"seen":null,"data":[],"raw":null,"big":-1099511627776,"alarm":null},"'
        b'b_tags":[{"id":4,"item_id":2,"label":"green","weight":null,"ok":null,"day":"2023-12-31","m'
        b'eta":"text","bits":"\\\\x","amount":99999999.99,"hidden":0}]},{"id":3,"owner_id":null,"title'
        b'":"orphan","price":null,"flag":null,"b_owners":null,"b_tags":[]},{"id":4,"owner_id":1,"tit'
        b'le":"fourth","price":0.1,"flag":true,"b_owners":{"id":1,"name":"Zo\\u00eb \\u2603 \\ud834\\udd'
        b'1e","score":1e-05,"balance":12.5,"active":true,"born":"1990-01-31","seen":"2024-05-06T07:0'
        b'8:09","data":{"n":0.1,"big":1e+16,"s":"\\u00e9\\u2028","list":[1,null,true]},"raw":"\\\\x00ff6'
        b'162","big":4611686018427387904,"alarm":"06:30:00"},"b_tags":[{"id":5,"item_id":4,"label":"'
        b'a","weight":100.0,"ok":true,"day":null,"meta":null,"bits":null,"amount":null,"hidden":0},{'
        b'"id":6,"item_id":4,"label":"b","weight":1e+300,"ok":false,"day":null,"meta":null,"bits":nu'
        b'll,"amount":null,"hidden":0},{"id":7,"item_id":4,"label":"c","weight":0.0,"ok":null,"day":'
        b'null,"meta":null,"bits":null,"amount":null,"hidden":0}]},{"id":5,"owner_id":3,"title":"fif'
        b'th","price":3.0,"flag":false,"b_owners":{"id":3,"name":null,"score":null,"balance":null,"a'
        b'ctive":null,"born":null,"seen":null,"data":null,"raw":null,"big":null,"alarm":null},"b_tag'
        b's":[]}]'
    ),
    (
        b'[{"id":5,"owner":{"name":null,"score":null,"active":null},"tags":[]},{"id":4,"owner":{"nam'
        b'e":"Zo\\u00eb \\u2603 \\ud834\\udd1e","score":1e-05,"active":true},"tags":[{"label":"a","weigh'
        b't":100.0,"ok":true},{"label":"b","weight":1e+300,"ok":false},{"label":"c","weight":0.0,"ok'
        b'":null}]},{"id":3,"owner":null,"tags":[]},{"id":2,"owner":{"name":"quote \\" back \\\\ tab\\t '
        b'nl\\n ctl\\u0001 del\\u007f","score":-123.456,"active":false},"tags":[{"label":"green","weigh'
        b't":null,"ok":null}]},{"id":1,"owner":{"name":"Zo\\u00eb \\u2603 \\ud834\\udd1e","score":1e-05,'
        b'"active":true},"tags":[{"label":"red","weight":0.5,"ok":true},{"label":"blue \\u2713","weig'
        b'ht":2.5e-07,"ok":false}]}]'
    ),
    (
        b'[{"id":1,"name":"Zo\\u00eb \\u2603 \\ud834\\udd1e","b_items":[{"id":1,"title":"first","price":'
        b'2.5,"b_tags":[{"label":"red","amount":1.5,"bits":"\\\\x01"},{"label":"blue \\u2713","amount":'
        b'-3.0,"bits":null}]},{"id":4,"title":"fourth","price":0.1,"b_tags":[{"label":"a","amount":n'
        b'ull,"bits":null},{"label":"b","amount":null,"bits":null},{"label":"c","amount":null,"bits"'
        b':null}]}]},{"id":2,"name":"quote \\" back \\\\ tab\\t nl\\n ctl\\u0001 del\\u007f","b_items":[{"i'
        b'd":2,"title":"s\\u00e9cond","price":1e+16,"b_tags":[{"label":"green","amount":99999999.99,"'
        b'bits":"\\\\x"}]}]},{"id":3,"name":null,"b_items":[{"id":5,"title":"fifth","price":3.0,"b_tag'
        b's":[]}]}]'
    ),
    (
        b'[{"id":1,"label":"red","b_items":{"title":"first","flag":true,"b_owners":{"name":"Zo\\u00eb'
        b' \\u2603 \\ud834\\udd1e","balance":12.5,"seen":"2024-05-06T07:08:09","alarm":"06:30:00"}}},{"'
        b'id":2,"label":"blue \\u2713","b_items":{"title":"first","flag":true,"b_owners":{"name":"Zo\\'
        b'u00eb \\u2603 \\ud834\\udd1e","balance":12.5,"seen":"2024-05-06T07:08:09","alarm":"06:30:00"}'
        b'}},{"id":4,"label":"green","b_items":{"title":"s\\u00e9cond","flag":false,"b_owners":{"name'
        b'":"quote \\" back \\\\ tab\\t nl\\n ctl\\u0001 del\\u007f","balance":0.125,"seen":null,"alarm":nu'
        b'll}}},{"id":5,"label":"a","b_items":{"title":"fourth","flag":true,"b_owners":{"name":"Zo\\u'
        b'00eb \\u2603 \\ud834\\udd1e","balance":12.5,"seen":"2024-05-06T07:08:09","alarm":"06:30:00"}}'
        b'},{"id":6,"label":"b","b_items":{"title":"fourth","flag":true,"b_owners":{"name":"Zo\\u00eb'
        b' \\u2603 \\ud834\\udd1e","balance":12.5,"seen":"2024-05-06T07:08:09","alarm":"06:30:00"}}},{"'
        b'id":7,"label":"c","b_items":{"title":"fourth","flag":true,"b_owners":{"name":"Zo\\u00eb \\u2'
        b'603 \\ud834\\udd1e","balance":12.5,"seen":"2024-05-06T07:08:09","alarm":"06:30:00"}}}]'
    ),
    (
        b'[{"id":1,"b_tags":[{"label":"red"}]},{"id":2,"b_tags":[{"label":"green"}]},{"id":4,"b_tags'
        b'":[{"label":"b"}]}]'
    ),
    (
        b'[{"id":1,"b_tags":[{"label":"blue \\u2713","day":null},{"label":"red","day":"2024-01-01"}]}'
        b',{"id":2,"b_tags":[{"label":"green","day":"2023-12-31"}]},{"id":3,"b_tags":[]},{"id":4,"b_'
        b'tags":[{"label":"c","day":null},{"label":"b","day":null}]},{"id":5,"b_tags":[]}]'
    ),
    (
        b'[{"id":1,"b_tags":[{"label":"red"}]},{"id":2,"b_tags":[]},{"id":3,"b_tags":[]},{"id":4,"b_'
        b'tags":[{"label":"b"},{"label":"c"}]},{"id":5,"b_tags":[]}]'
    ),
    (
        b'[{"id":1,"name":"Zo\\u00eb \\u2603 \\ud834\\udd1e","data":{"n":0.1,"big":1e+16,"s":"\\u00e9\\u20'
        b'28","list":[1,null,true]},"b_tags":[{"count":2}]},{"id":2,"name":"quote \\" back \\\\ tab\\t n'
        b'l\\n ctl\\u0001 del\\u007f","data":[],"b_tags":[{"count":1}]},{"id":3,"name":null,"data":null'
        b',"b_tags":[{"count":0}]},{"id":4,"name":"Zo\\u00eb \\u2603 \\ud834\\udd1e","data":{"n":0.1,"bi'
        b'g":1e+16,"s":"\\u00e9\\u2028","list":[1,null,true]},"b_tags":[{"count":3}]},{"id":5,"name":n'
        b'ull,"data":null,"b_tags":[{"count":0}]}]'
    ),
    (
        b'[{"id":1,"b_owners":{"name":"Zo\\u00eb \\u2603 \\ud834\\udd1e"}},{"id":4,"b_owners":{"name":"Z'
        b'o\\u00eb \\u2603 \\ud834\\udd1e"}}]'
    ),
    (
        b'[{"title":"first","b_tags":[{"id":1,"item_id":1,"label":"red","weight":0.5,"ok":true,"day"'
        b':"2024-01-01","meta":{"k":"v"},"bits":"\\\\x01","amount":1.5,"hidden":0,"b_items":{"title":"'
        b'first","b_owners":{"id":1,"name":"Zo\\u00eb \\u2603 \\ud834\\udd1e","score":1e-05,"balance":12'
        b'.5,"active":true,"born":"1990-01-31","seen":"2024-05-06T07:08:09","data":{"n":0.1,"big":1e'
        b'+16,"s":"\\u00e9\\u2028","list":[1,null,true]},"raw":"\\\\x00ff6162","big":4611686018427387904'
        b',"alarm":"06:30:00"}}},{"id":2,"item_id":1,"label":"blue \\u2713","weight":2.5e-07,"ok":fal'
        b'se,"day":null,"meta":[1,2.5],"bits":null,"amount":-3.0,"hidden":0,"b_items":{"title":"firs'
        b't","b_owners":{"id":1,"name":"Zo\\u00eb \\u2603 \\ud834\\udd1e","score":1e-05,"balance":12.5,"'
        b'active":true,"born":"1990-01-31","seen":"2024-05-06T07:08:09","data":{"n":0.1,"big":1e+16,'
        b'"s":"\\u00e9\\u2028","list":[1,null,true]},"raw":"\\\\x00ff6162","big":4611686018427387904,"al'
        b'arm":"06:30:00"}}}]},{"title":"fourth","b_tags":[{"id":5,"item_id":4,"label":"a","weight":'
        b'100.0,"ok":true,"day":null,"meta":null,"bits":null,"amount":null,"hidden":0,"b_items":{"ti'
        b'tle":"fourth","b_owners":{"id":1,"name":"Zo\\u00eb \\u2603 \\ud834\\udd1e","score":1e-05,"bala'
        b'nce":12.5,"active":true,"born":"1990-01-31","seen":"2024-05-06T07:08:09","data":{"n":0.1,"'
        b'big":1e+16,"s":"\\u00e9\\u2028","list":[1,null,true]},"raw":"\\\\x00ff6162","big":461168601842'
        b'7387904,"alarm":"06:30:00"}}},{"id":6,"item_id":4,"label":"b","weight":1e+300,"ok":false,"'
        b'day":null,"meta":null,"bits":null,"amount":null,"hidden":0,"b_items":{"title":"fourth","b_'
        b'owners":{"id":1,"name":"Zo\\u00eb \\u2603 \\ud834\\udd1e","score":1e-05,"balance":12.5,"active'
        b'":true,"born":"1990-01-31","seen":"2024-05-06T07:08:09","data":{"n":0.1,"big":1e+16,"s":"\\'
        b'u00e9\\u2028","list":[1,null,true]},"raw":"\\\\x00ff6162","big":4611686018427387904,"alarm":"'
        b'06:30:00"}}},{"id":7,"item_id":4,"label":"c","weight":0.0,"ok":null,"day":null,"meta":null'
        b',"bits":null,"amount":null,"hidden":0,"b_items":{"title":"fourth","b_owners":{"id":1,"name'
        b'":"Zo\\u00eb \\u2603 \\ud834\\udd1e","score":1e-05,"balance":12.5,"active":true,"born":"1990-0'
        b'1-31","seen":"2024-05-06T07:08:09","data":{"n":0.1,"big":1e+16,"s":"\\u00e9\\u2028","list":['
        b'1,null,true]},"raw":"\\\\x00ff6162","big":4611686018427387904,"alarm":"06:30:00"}}}]}]'
    ),
    (
        b'[{"id":2,"name":"quote \\" back \\\\ tab\\t nl\\n ctl\\u0001 del\\u007f","score":-123.456,"balanc'
        b'e":0.125,"active":false,"born":null,"seen":null,"data":[],"raw":null,"big":-1099511627776,'
        b'"alarm":null,"b_items":[{"count":1}]},{"id":3,"name":null,"score":null,"balance":null,"act'
        b'ive":null,"born":null,"seen":null,"data":null,"raw":null,"big":null,"alarm":null,"b_items"'
        b':[{"count":1}]}]'
    ),
    (
        b'[{"id":1,"owner":{"big":4611686018427387904,"raw":"\\\\x00ff6162"},"b_tags":[{"meta":{"k":"v'
        b'"},"amount":1.5},{"meta":[1,2.5],"amount":-3.0}]},{"id":2,"owner":{"big":-1099511627776,"r'
        b'aw":null},"b_tags":[{"meta":"text","amount":99999999.99}]},{"id":4,"owner":{"big":46116860'
        b'18427387904,"raw":"\\\\x00ff6162"},"b_tags":[{"meta":null,"amount":null},{"meta":null,"amoun'
        b't":null},{"meta":null,"amount":null}]},{"id":5,"owner":{"big":null,"raw":null},"b_tags":[]'
        b"}]"
    ),
]


PLAIN_EXPECTED = [
    (
        b'[{"id":1,"title":"first","owner":{"id":1,"name":"Zo\\u00eb \\u2603 \\ud834\\udd1e"},"b_tags":['
        b'{"label":"red"},{"label":"blue \\u2713"}]},{"id":2,"title":"s\\u00e9cond","owner":{"id":2,"n'
        b'ame":"quote \\" back \\\\ tab\\t nl\\n ctl\\u0001 del\\u007f"},"b_tags":[{"label":"green"}]},{"id'
        b'":3,"title":"orphan","owner":null,"b_tags":[]},{"id":4,"title":"fourth","owner":{"id":1,"n'
        b'ame":"Zo\\u00eb \\u2603 \\ud834\\udd1e"},"b_tags":[{"label":"a"},{"label":"b"},{"label":"c"}]}'
        b',{"id":5,"title":"fifth","owner":{"id":3,"name":null},"b_tags":[]}]'
    ),
    (
        b'[{"name":"Zo\\u00eb \\u2603 \\ud834\\udd1e","b_items":[{"title":"first","b_tags":[{"id":1,"lab'
        b'el":"red"},{"id":2,"label":"blue \\u2713"}]},{"title":"fourth","b_tags":[{"id":5,"label":"a'
        b'"},{"id":6,"label":"b"},{"id":7,"label":"c"}]}]},{"name":"quote \\" back \\\\ tab\\t nl\\n ctl\\'
        b'u0001 del\\u007f","b_items":[{"title":"s\\u00e9cond","b_tags":[{"id":4,"label":"green"}]}]},'
        b'{"name":null,"b_items":[{"title":"fifth","b_tags":[]}]}]'
    ),
    (
        b'[{"title":"fifth","b_tags":[{"count":0}],"name":null},{"title":"fourth","b_tags":[{"count"'
        b':3}],"name":"Zo\\u00eb \\u2603 \\ud834\\udd1e"},{"title":"orphan","b_tags":[{"count":0}],"name'
        b'":null},{"title":"s\\u00e9cond","b_tags":[{"count":1}],"name":"quote \\" back \\\\ tab\\t nl\\n '
        b'ctl\\u0001 del\\u007f"},{"title":"first","b_tags":[{"count":2}],"name":"Zo\\u00eb \\u2603 \\ud8'
        b'34\\udd1e"}]'
    ),
    (
        b'{"id":2,"title":"s\\u00e9cond","b_owners":{"name":"quote \\" back \\\\ tab\\t nl\\n ctl\\u0001 de'
        b'l\\u007f"}}'
    ),
    (
        b'[{"id":1,"b_owners":{"name":"Zo\\u00eb \\u2603 \\ud834\\udd1e","id":1}},{"id":2,"b_owners":{"n'
        b'ame":"quote \\" back \\\\ tab\\t nl\\n ctl\\u0001 del\\u007f","id":2}},{"id":3},{"id":4,"b_owners'
        b'":{"name":"Zo\\u00eb \\u2603 \\ud834\\udd1e","id":1}},{"id":5,"b_owners":{"id":3}}]'
    ),
    (b"[]"),
    (b'[{"id":2,"b_owners":{"name":"quote \\" back \\\\ tab\\t nl\\n ctl\\u0001 del\\u007f"}}]'),
]
