"""The official Python SDK (`supabase`, as an app installs it) against minibase over a real waitress
server, on both databases: auth, the owner rule, PostgREST's error codes as the SDK reads them,
upsert on an inline UNIQUE column, write counts, and auth.admin with bans."""

from datetime import datetime

import pytest

from support import supabase_clients

supabase = pytest.importorskip("supabase")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # about the SDK's own internals
from postgrest.exceptions import APIError  # noqa: E402
from supabase_auth.errors import AuthApiError, AuthWeakPasswordError  # noqa: E402


@pytest.fixture
def connect(sdk_server):
    """create_client as an app calls it, over HTTP clients closed when the test ends."""
    with supabase_clients(sdk_server) as make:
        yield make


@pytest.fixture
def client(connect, anon_key):
    return connect(anon_key)


@pytest.fixture
def admin(connect, service_key):
    return connect(service_key).auth.admin


def test_auth_and_the_owner_rule(connect, anon_key):
    ann, bob = connect(anon_key), connect(anon_key)
    signed_up = ann.auth.sign_up({"email": "ann@example.com", "password": "secret-pw"})
    assert signed_up.user.id == "1"
    bob.auth.sign_up({"email": "bob@example.com", "password": "secret-pw"})
    ann.table("notes").insert({"body": "ann's"}).execute()
    bob.table("notes").insert({"body": "bob's"}).execute()
    assert [row["body"] for row in ann.table("notes").select("*").execute().data] == ["ann's"]
    # The id note: a string in auth, an integer in rows.
    row = ann.table("notes").select("user_id").single().execute().data
    assert str(row["user_id"]) == ann.auth.get_user().user.id
    ann.auth.sign_out()


def test_error_codes_as_the_sdk_reads_them(client):
    client.auth.sign_up({"email": "ann@example.com", "password": "secret-pw"})
    client.table("tags").insert({"id": 1, "name": "red"}).execute()
    with pytest.raises(APIError) as duplicate:
        client.table("tags").insert({"id": 1, "name": "blue"}).execute()
    assert duplicate.value.code == "23505"
    with pytest.raises(APIError) as none:
        client.table("tags").select("*").eq("name", "nope").single().execute()
    assert none.value.code == "PGRST116"
    with pytest.raises(APIError) as column:
        client.table("tags").select("colour").execute()
    assert column.value.code == "42703" and "colour" in column.value.message
    with pytest.raises(APIError) as table:
        client.table("tagz").select("*").execute()
    assert table.value.code == "PGRST205"


def test_upsert_on_an_inline_unique_column_and_write_counts(client):
    inserted = client.table("tags").insert([{"name": "red"}, {"name": "blue"}], count="exact").execute()
    assert inserted.count == 2
    upserted = client.table("tags").upsert({"name": "red", "uses": 5}, on_conflict="name").execute()
    assert upserted.data[0]["uses"] == 5
    assert [r["name"] for r in client.table("tags").select("name").order("id").execute().data] == [
        "red",
        "blue",
    ]
    updated = client.table("tags").update({"uses": 1}, count="exact").gte("id", 1).execute()
    assert updated.count == 2


def test_a_weak_password_and_a_wrong_one(client):
    with pytest.raises(AuthWeakPasswordError) as weak:
        client.auth.sign_up({"email": "ann@example.com", "password": "123"})
    assert weak.value.reasons == ["length"]
    client.auth.sign_up({"email": "ann@example.com", "password": "secret-pw"})
    with pytest.raises(AuthApiError) as wrong:
        client.auth.sign_in_with_password({"email": "ann@example.com", "password": "wrong-pw"})
    assert wrong.value.code == "invalid_credentials"


def test_admin_lists_gets_bans_and_deletes(client, admin):
    client.auth.sign_up({"email": "ann@example.com", "password": "secret-pw"})
    client.auth.sign_out()
    users = admin.list_users()
    assert [user.email for user in users] == ["ann@example.com"]
    uuid = "00000000-0000-0000-0000-000000000001"
    assert admin.get_user_by_id(uuid).user.email == "ann@example.com"
    admin.update_user_by_id(uuid, {"ban_duration": "24h", "app_metadata": {"plan": "pro"}})
    with pytest.raises(AuthApiError) as banned:
        client.auth.sign_in_with_password({"email": "ann@example.com", "password": "secret-pw"})
    assert banned.value.code == "user_banned"
    lifted = admin.update_user_by_id(uuid, {"ban_duration": "none"})
    assert lifted.user.app_metadata["plan"] == "pro"
    assert client.auth.sign_in_with_password({"email": "ann@example.com", "password": "secret-pw"}).user
    client.auth.sign_out()
    admin.delete_user(uuid)
    assert admin.list_users() == []


def test_mfa_as_the_sdk_drives_it(connect, anon_key, admin):
    """enroll, challenge, verify, the assurance level, list_factors and unenroll; codes from pyotp."""
    pyotp = pytest.importorskip("pyotp")
    client = connect(anon_key)
    client.auth.sign_up({"email": "mfa@example.com", "password": "secret-pw"})
    mfa = client.auth.mfa
    enrolled = mfa.enroll({"factor_type": "totp", "friendly_name": "phone"})
    assert enrolled.totp.qr_code.startswith("data:image/svg+xml;utf-8,<svg")
    level = mfa.get_authenticator_assurance_level()
    assert (level.current_level, level.next_level) == ("aal1", "aal1")  # the factor is not verified yet
    assert [f.status for f in mfa.list_factors().all] == ["unverified"]
    challenge = mfa.challenge({"factor_id": enrolled.id})
    used = pyotp.TOTP(enrolled.totp.secret).now()
    mfa.verify({"factor_id": enrolled.id, "challenge_id": challenge.id, "code": used})
    level = mfa.get_authenticator_assurance_level()
    assert (level.current_level, level.next_level) == ("aal2", "aal2")
    assert [entry.method for entry in level.current_authentication_methods] == ["totp", "password"]
    assert [f.id for f in mfa.list_factors().totp] == [enrolled.id]

    again = connect(anon_key)
    again.auth.sign_in_with_password({"email": "mfa@example.com", "password": "secret-pw"})
    level = again.auth.mfa.get_authenticator_assurance_level()
    assert (level.current_level, level.next_level) == ("aal1", "aal2")
    with pytest.raises(AuthApiError) as refused:
        again.auth.mfa.unenroll({"factor_id": enrolled.id})
    assert refused.value.code == "insufficient_aal"
    with pytest.raises(AuthApiError) as replayed:  # a code that got in once never does again
        again.auth.mfa.challenge_and_verify({"factor_id": enrolled.id, "code": used})
    assert replayed.value.code == "mfa_verification_failed"

    user_id = client.auth.get_user().user.id
    uuid = f"00000000-0000-0000-0000-{int(user_id):012d}"
    assert [f.id for f in admin.mfa.list_factors({"user_id": uuid})] == [enrolled.id]
    assert mfa.unenroll({"factor_id": enrolled.id}).id == enrolled.id
    assert mfa.list_factors().all == []


def test_update_user_needs_the_second_factor_once_there_is_one(connect, anon_key):
    """update_user({password}) / ({email}) from an aal1 session of a user with a verified factor is
    the SDK's AuthApiError insufficient_aal; after challenge_and_verify (aal2) it succeeds. The
    control: before the factor is verified the same aal1 change succeeds."""
    pyotp = pytest.importorskip("pyotp")
    client = connect(anon_key)
    client.auth.sign_up({"email": "mfa@example.com", "password": "secret-pw"})
    enrolled = client.auth.mfa.enroll({"factor_type": "totp", "friendly_name": "phone"})
    assert client.auth.update_user({"password": "second-pw"}).user.email == "mfa@example.com"
    totp = pyotp.TOTP(enrolled.totp.secret)
    client.auth.mfa.challenge_and_verify({"factor_id": enrolled.id, "code": totp.now()})

    thief = connect(anon_key)
    thief.auth.sign_in_with_password({"email": "mfa@example.com", "password": "second-pw"})
    for change in ({"password": "stolen-pw"}, {"email": "thief@example.com"}):
        with pytest.raises(AuthApiError) as refused:
            thief.auth.update_user(change)
        assert refused.value.code == "insufficient_aal" and refused.value.status == 401
        assert "AAL2 session is required" in refused.value.message
    assert thief.auth.get_user().user.email == "mfa@example.com"

    owner = connect(anon_key)
    owner.auth.sign_in_with_password({"email": "mfa@example.com", "password": "second-pw"})
    factor_id = owner.auth.mfa.list_factors().totp[0].id
    challenge = owner.auth.mfa.challenge({"factor_id": factor_id})
    step = totp.timecode(datetime.now()) + 1  # the last code is used up
    owner.auth.mfa.verify(
        {"factor_id": factor_id, "challenge_id": challenge.id, "code": totp.generate_otp(step)}
    )
    assert owner.auth.mfa.get_authenticator_assurance_level().current_level == "aal2"
    assert (
        owner.auth.update_user({"password": "third-pw", "email": "new@example.com"}).user.email
        == "new@example.com"
    )
