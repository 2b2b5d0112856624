// supabase-js as an app configured with Supabase's new keys uses it: createClient with a
// publishable key (sign-up, a table, storage) and with a secret key on a server (admin, a write
// only service_role may make). tests/test_api_keys.py runs this and checks what it prints.
import { createClient } from '@supabase/supabase-js'
import WebSocket from 'ws' // Node 20 has no WebSocket of its own; supabase-js's Realtime wants one

const { MINIBASE_URL: url, PUBLISHABLE_KEY: publishable, SECRET_KEY: secret } = process.env
const options = { realtime: { transport: WebSocket }, auth: { persistSession: false, autoRefreshToken: false } }
const client = createClient(url, publishable, options)
const admin = createClient(url, secret, options)
const out = {}

out.signedUp = (await client.auth.signUp({ email: 'js@example.com', password: 'secret-pw' })).data.user?.email
out.inserted = (await client.from('notes').insert({ id: 1, body: 'from js' }).select()).data
out.read = (await client.from('notes').select('body')).data
out.anonWrite = (await createClient(url, publishable, options).from('tags').insert({ id: 1, name: 'x' })).error?.code
out.adminWrite = (await admin.from('tags').insert({ id: 1, name: 'red' })).status
out.tags = (await client.from('tags').select('name')).data
out.users = (await admin.auth.admin.listUsers()).data.users.map((user) => user.email)
const avatars = client.storage.from('avatars')
out.upload = (await avatars.upload('js/hello.txt', new Blob(['hello from js'], { type: 'text/plain' }))).error
out.download = await (await avatars.download('js/hello.txt')).data?.text()
out.buckets = (await admin.storage.listBuckets()).data?.map((bucket) => bucket.id)
console.log(JSON.stringify(out))
process.exit(0)
