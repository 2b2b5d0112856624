"""The capture triggers are made by each start for what its own tables.toml opts in, and dropped by
no start: two instances whose files differ (a rolling deploy) keep each other's; `flask --app app
realtime prune` drops those no table opts in any longer. On both databases."""

import sqlalchemy as sa

from extensions import db
from live import capture

REALTIME = """
[tables.{name}]
select = "anon"
realtime = true
"""


def make_tables(url, *names):
    auto = "AUTO_INCREMENT" if url.startswith("mysql") else "AUTOINCREMENT"
    engine = sa.create_engine(url)
    with engine.begin() as connection:
        for name in names:
            connection.exec_driver_sql(
                f"CREATE TABLE {name} (id INTEGER PRIMARY KEY {auto}, body VARCHAR(20))"
            )
    engine.dispose()


def ours(app):
    with app.app_context():
        return set(capture._existing(db.engine.dialect.name))


def names(table, prefix=capture.PREFIX):
    return {capture.trigger_name(table, operation, prefix) for operation in capture.OPERATIONS}


def test_two_instances_with_different_files_started_in_turns_keep_each_others_triggers(
    make_app, database_url, tmp_path
):
    make_tables(database_url, "posts", "comments")
    old, new = tmp_path / "old.toml", tmp_path / "new.toml"
    old.write_text(REALTIME.format(name="posts"))
    new.write_text(REALTIME.format(name="comments"))
    first, second = make_app(TABLES_CONFIG=str(old)), make_app(TABLES_CONFIG=str(new))
    for app in (first, second, first, second):
        with app.app_context():
            assert all(reason is None for reason in capture.install().values())
    assert ours(first) == names("posts") | names("comments")
    with first.app_context():
        db.session.execute(sa.text("INSERT INTO posts (body) VALUES ('a')"))
        db.session.execute(sa.text("INSERT INTO comments (body) VALUES ('b')"))
        db.session.commit()
        logged = (
            db.session.execute(sa.text("SELECT table_name FROM minibase_realtime_changes")).scalars().all()
        )
    assert sorted(logged) == ["comments", "posts"]  # both still captured

    # once every instance serves the new file, the operator prunes: only posts' triggers go
    result = second.test_cli_runner().invoke(args=["realtime", "prune"])
    assert result.exit_code == 0, result.output
    assert "3 trigger(s) dropped" in result.output
    assert ours(first) == names("comments")
    again = second.test_cli_runner().invoke(args=["realtime", "prune"])
    assert "0 trigger(s) dropped" in again.output


def test_a_webhook_table_is_captured_into_the_outbox_without_realtime(make_app, database_url, tmp_path):
    make_tables(database_url, "orders")
    config = tmp_path / "tables.toml"
    config.write_text(
        '[webhooks.w]\ntable = "orders"\nurl = "http://127.0.0.1:9/"\n'
        'secret = "whsec_d3d3d3d3d3d3d3d3d3d3d3d3d3d3d3d3d3d3d3d3d3c="\n'
    )
    app = make_app(TABLES_CONFIG=str(config))
    with app.app_context():
        assert capture.install(["orders"]) == {"orders": None}
        assert capture.install() == {}  # no table opts in to Realtime
        db.session.execute(sa.text("INSERT INTO orders (body) VALUES ('a')"))
        db.session.commit()
        assert db.session.execute(sa.text("SELECT count(*) FROM minibase_webhook_events")).scalar() == 1
        assert db.session.execute(sa.text("SELECT count(*) FROM minibase_realtime_changes")).scalar() == 0
    assert ours(app) == names("orders", capture.WEBHOOK_PREFIX)
    # prune keeps what the file's webhooks name
    assert app.test_cli_runner().invoke(args=["realtime", "prune"]).output.endswith("0 trigger(s) dropped\n")


def test_a_table_with_realtime_and_a_webhook_logs_each_change_into_both(make_app, database_url, tmp_path):
    """Two sets of triggers on one table (MariaDB and MySQL allow several per event since 10.2/5.7)."""
    make_tables(database_url, "posts")
    config = tmp_path / "tables.toml"
    config.write_text(
        REALTIME.format(name="posts") + '\n[webhooks.w]\ntable = "posts"\nurl = "http://127.0.0.1:9/"\n'
        'secret = "whsec_d3d3d3d3d3d3d3d3d3d3d3d3d3d3d3d3d3d3d3d3d3c="\n'
    )
    app = make_app(TABLES_CONFIG=str(config))
    with app.app_context():
        assert capture.install() == {"posts": None}
        assert capture.install(["posts"]) == {"posts": None}
        db.session.execute(sa.text("INSERT INTO posts (body) VALUES ('a')"))
        db.session.execute(sa.text("UPDATE posts SET body = 'b'"))
        db.session.commit()
        for log in ("minibase_realtime_changes", "minibase_webhook_events"):
            found = db.session.execute(sa.text(f"SELECT operation FROM {log} ORDER BY id")).scalars().all()
            assert found == ["INSERT", "UPDATE"], log
    assert ours(app) == names("posts") | names("posts", capture.WEBHOOK_PREFIX)
