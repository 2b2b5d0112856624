// tus-js-client against minibase's resumable uploads, as an app uses it (Supabase's docs: 6 MB
// chunks, the user's token, x-upsert, the object described in the metadata), and through a proxy
// that cuts the connection in the middle of the upload: the client resumes from the offset the
// server gives. tests/storage/test_resumable_clients.py runs this and checks the JSON it prints.
import { createHash, randomBytes } from 'node:crypto'
import net from 'node:net'
import * as tus from 'tus-js-client'

const { MINIBASE_URL: base, ANON_KEY: anon } = process.env
const out = {}
const digest = (bytes) => createHash('sha256').update(bytes).digest('hex')

async function signUp (email) {
  const response = await fetch(`${base}/auth/v1/signup`, {
    method: 'POST',
    headers: { apikey: anon, 'Content-Type': 'application/json' },
    body: JSON.stringify({ email, password: 'secret-pw' })
  })
  const body = await response.json()
  if (!body.access_token) throw new Error(`signup: ${JSON.stringify(body)}`)
  return { token: body.access_token, id: String(body.user.id) }
}

// A TCP proxy to minibase that closes both sides once `cutAfter` bytes have gone up, once.
function cuttingProxy (cutAfter) {
  const target = new URL(base)
  const state = { cut: false, sent: 0 }
  const server = net.createServer((client) => {
    const upstream = net.connect(Number(target.port), target.hostname)
    client.on('error', () => {})
    upstream.on('error', () => {})
    client.on('data', (data) => {
      state.sent += data.length
      if (!state.cut && state.sent > cutAfter) {
        state.cut = true
        upstream.destroy()
        client.destroy()
        return
      }
      upstream.write(data)
    })
    upstream.on('data', (data) => client.write(data))
    client.on('close', () => upstream.destroy())
    upstream.on('close', () => client.destroy())
  })
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve({ server, state })))
}

function upload (data, options) {
  const seen = []
  return new Promise((resolve, reject) => {
    const task = new tus.Upload(data, {
      retryDelays: [0, 100, 300],
      removeFingerprintOnSuccess: true,
      onAfterResponse (req, res) {
        seen.push({ method: req.getMethod(), status: res.getStatus(), offset: res.getHeader('Upload-Offset') })
      },
      onError: (error) => reject(Object.assign(error, { seen })),
      onSuccess: () => resolve({ url: task.url, seen }),
      ...options
    })
    task.start()
  })
}

async function download (path, token) {
  const response = await fetch(`${base}/storage/v1/object/${path}`, {
    headers: { apikey: anon, Authorization: `Bearer ${token}` }
  })
  return { status: response.status, bytes: Buffer.from(await response.arrayBuffer()), type: response.headers.get('content-type'), cache: response.headers.get('cache-control') }
}

const ann = await signUp('ann@example.com')
const bob = await signUp('bob@example.com')

// As Supabase's docs write it: 6 MB chunks, the first sent with the creation.
const big = randomBytes(7 * 1024 * 1024)
const done = await upload(big, {
  endpoint: `${base}/storage/v1/upload/resumable`,
  chunkSize: 6 * 1024 * 1024,
  uploadDataDuringCreation: true,
  headers: { apikey: anon, authorization: `Bearer ${ann.token}`, 'x-upsert': 'true' },
  metadata: { bucketName: 'files', objectName: `${ann.id}/big.bin`, contentType: 'application/octet-stream', cacheControl: '3600' }
})
const got = await download(`files/${ann.id}/big.bin`, ann.token)
out.big = { status: got.status, same: digest(got.bytes) === digest(big), cache: got.cache, requests: done.seen.map((s) => `${s.method} ${s.status}`) }

// Cut mid-upload: tus-js-client asks the server where it stands (HEAD) and goes on from there.
const { server, state } = await cuttingProxy(300 * 1024)
const port = server.address().port
const data = randomBytes(1024 * 1024)
const resumed = await upload(data, {
  endpoint: `http://127.0.0.1:${port}/storage/v1/upload/resumable`,
  chunkSize: 64 * 1024,
  headers: { apikey: anon, authorization: `Bearer ${ann.token}` },
  metadata: { bucketName: 'files', objectName: `${ann.id}/resumed.bin`, contentType: 'application/octet-stream' }
})
server.close()
const heads = resumed.seen.filter((s) => s.method === 'HEAD')
const back = await download(`files/${ann.id}/resumed.bin`, ann.token)
out.resumed = {
  cut: state.cut,
  heads: heads.map((s) => Number(s.offset)),
  patches: resumed.seen.filter((s) => s.method === 'PATCH').length,
  same: digest(back.bytes) === digest(data),
  size: back.bytes.length
}

// Bob cannot take over Ann's upload by its URL.
const started = await fetch(`${base}/storage/v1/upload/resumable`, {
  method: 'POST',
  headers: {
    apikey: anon,
    authorization: `Bearer ${ann.token}`,
    'Tus-Resumable': '1.0.0',
    'Upload-Length': '10',
    'Upload-Metadata': `bucketName ${Buffer.from('files').toString('base64')},objectName ${Buffer.from(`${ann.id}/x.bin`).toString('base64')}`
  }
})
try {
  await upload(Buffer.from('bob wrote!'), {
    uploadUrl: started.headers.get('location'),
    retryDelays: [],
    headers: { apikey: anon, authorization: `Bearer ${bob.token}` }
  })
  out.takeover = 'uploaded'
} catch (error) {
  out.takeover = error.originalResponse?.getStatus() ?? String(error)
}

console.log(JSON.stringify(out))
