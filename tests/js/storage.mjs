// supabase-js's storage client against minibase, as an app calls it: tests/storage/test_sdks.py
// runs this with the server's URL and keys in the environment and checks the JSON it prints.
import { createClient } from '@supabase/supabase-js'
import WebSocket from 'ws'

const { MINIBASE_URL: url, ANON_KEY: anon, SERVICE_KEY: service } = process.env
const options = { realtime: { transport: WebSocket }, auth: { persistSession: false } }
const client = createClient(url, anon, options)
const admin = createClient(url, service, { ...options, auth: { ...options.auth, autoRefreshToken: false } })
const out = {}
const fail = (what, error) => { if (error) throw new Error(`${what}: ${JSON.stringify(error)}`) }

const buckets = await admin.storage.listBuckets()
fail('listBuckets', buckets.error)
out.buckets = buckets.data.map((b) => b.id).sort()
const created = await admin.storage.createBucket('docs', { public: false, fileSizeLimit: '1MB' })
fail('createBucket', created.error)
out.created = created.data.name
fail('updateBucket', (await admin.storage.updateBucket('docs', { public: true })).error)
fail('getBucket', (await admin.storage.getBucket('docs')).error)

fail('signUp', (await client.auth.signUp({ email: 'js@example.com', password: 'secret-pw' })).error)
const avatars = client.storage.from('avatars')
const uploaded = await avatars.upload('js/hello.txt', 'hello from js', { contentType: 'text/plain' })
fail('upload', uploaded.error)
out.uploaded = uploaded.data.fullPath
out.downloaded = await (await avatars.download('js/hello.txt')).data.text()
const blob = await avatars.update('js/blob.txt', new Blob(['x'], { type: 'text/plain' }))
out.updateMissing = blob.error?.statusCode
fail('upload blob', (await avatars.upload('js/blob.txt', new Blob(['blob'], { type: 'text/plain' }))).error)
out.listed = (await avatars.list('js', { limit: 1, sortBy: { column: 'name', order: 'desc' } })).data.map((e) => e.name)
const page1 = await avatars.listV2({ prefix: 'js/', with_delimiter: true, limit: 1 })
fail('listV2', page1.error)
const page2 = await avatars.listV2({ prefix: 'js/', with_delimiter: true, limit: 1, cursor: page1.data.nextCursor })
out.listV2 = [page1.data, page2.data].map((p) => [p.hasNext, p.objects.map((o) => o.name), p.folders.length])
const tooLarge = await avatars.upload('js/big.txt', 'x'.repeat(1001), { contentType: 'text/plain' })
out.tooLarge = [tooLarge.error?.statusCode, tooLarge.error?.message]
const dot = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC', 'base64')
fail('upload png', (await avatars.upload('js/dot.png', dot, { contentType: 'image/png', upsert: true })).error)
const rendition = await avatars.createSignedUrl('js/dot.png', 60, { transform: { width: 2, height: 2, quality: 60 } })
fail('createSignedUrl transform', rendition.error)
out.transformations = (await fetch(rendition.data.signedUrl)).headers.get('x-transformations')
out.info = (await avatars.info('js/hello.txt')).data?.size
out.exists = (await avatars.exists('js/hello.txt')).data
out.missing = (await avatars.exists('js/none.txt')).data
out.public = await (await fetch(avatars.getPublicUrl('js/hello.txt').data.publicUrl)).text()
const signed = await avatars.createSignedUrl('js/hello.txt', 60)
fail('createSignedUrl', signed.error)
out.signed = await (await fetch(signed.data.signedUrl)).text()
const batch = await avatars.createSignedUrls(['js/hello.txt', 'js/blob.txt'], 60)
out.batch = batch.data.filter((d) => d.signedUrl).length
const uploadUrl = await avatars.createSignedUploadUrl('js/token.txt')
fail('createSignedUploadUrl', uploadUrl.error)
fail('uploadToSignedUrl', (await avatars.uploadToSignedUrl('js/token.txt', uploadUrl.data.token, 'via token', { contentType: 'text/plain' })).error)
out.viaToken = await (await avatars.download('js/token.txt')).data.text()
fail('move', (await avatars.move('js/token.txt', 'js/moved.txt')).error)
fail('copy', (await avatars.copy('js/moved.txt', 'js/copied.txt')).error)
out.moved = await (await avatars.download('js/copied.txt')).data.text()
const removed = await avatars.remove(['js/hello.txt', 'js/moved.txt', 'js/copied.txt'])
fail('remove', removed.error)
out.removed = removed.data.length
out.refused = (await client.storage.from('locked').upload('x.txt', 'x')).error?.statusCode
out.notFound = (await avatars.download('js/hello.txt')).error?.status
fail('emptyBucket', (await admin.storage.emptyBucket('docs')).error)
out.deleted = (await admin.storage.deleteBucket('docs')).data?.message
console.log(JSON.stringify(out))
