"""What supabase-js's own integration tests check of Realtime against a Supabase server (its
test/integration.test.ts, "Realtime with vsn" and "Custom JWT"), run through supabase-js against
minibase with both serializers: broadcast on a private channel of a signed-up user, the socket's
life as channels come and go, httpSend (JSON and bytes, public and private), and a custom JWT."""

import json
import os
import subprocess

import pytest

from support import SECRET

pytestmark = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)

# Their project's policies on realtime.messages: a signed-in user may read and send on any topic
# whose name holds "channel".
RULES = """
[realtime]
select = "authenticated"
insert = "authenticated"

[realtime.policies]
select = "topic LIKE '%channel%'"
insert = "topic LIKE '%channel%'"
"""


@pytest.mark.parametrize("vsn", ["1.0.0", "2.0.0"])
def test_supabase_js_realtime_integration_checks(node_modules, start_server, vsn):
    server = start_server(RULES, MAILER_AUTOCONFIRM="true")
    env = {
        **os.environ,
        "MINIBASE_URL": server.base,
        "ANON_KEY": server.anon,
        "JWT_SECRET": SECRET,
        "VSN": vsn,
    }
    done = subprocess.run(
        ["node", "realtime_integration.mjs"],
        cwd=node_modules.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    binary = "ok" if vsn == "2.0.0" else "skipped"
    assert out == {
        "connectAndBroadcast": "ok",
        "switchingChannelsKeepsTheSocket": "ok",
        "removeChannelDisconnectsLater": "ok",
        "unsubscribeDisconnectsLater": "ok",
        "removeAllChannelsDisconnectsAtOnce": "ok",
        "httpSendJsonToAPublicChannel": "ok",
        "httpSendJsonToAPrivateChannel": "ok",
        "httpSendBytesToAPrivateChannel": binary,
        "customJwt": "ok",
    }
