// Uppy with its tus plugin, bundled for the browser by tests/storage/test_resumable_clients.py
// (esbuild, from node_modules: no CDN): window.uploadWithUppy uploads one file as Supabase's docs
// set Uppy up (6 MB chunks, data with the creation, the object described in the file's meta).
import Uppy from '@uppy/core'
import Tus from '@uppy/tus'

// The file's bytes are made here (byte i is (i * 31 + 7) % 251), so the test knows them without
// sending megabytes through the page.
window.uploadWithUppy = async ({ endpoint, anon, token, bucketName, objectName, type, size }) => {
  const bytes = new Uint8Array(size)
  for (let i = 0; i < size; i++) bytes[i] = (i * 31 + 7) % 251
  const uppy = new Uppy({ autoProceed: false })
  uppy.use(Tus, {
    endpoint,
    headers: { authorization: `Bearer ${token}`, apikey: anon },
    uploadDataDuringCreation: true,
    chunkSize: 6 * 1024 * 1024,
    retryDelays: [],
    allowedMetaFields: ['bucketName', 'objectName', 'contentType', 'cacheControl']
  })
  uppy.on('file-added', (file) => {
    file.meta = { ...file.meta, bucketName, objectName, contentType: file.type, cacheControl: '3600' }
  })
  uppy.addFile({ name: objectName.split('/').pop(), type, data: new Blob([bytes], { type }) })
  const result = await uppy.upload()
  return {
    successful: result.successful.length,
    failed: result.failed.map((file) => String(file.error))
  }
}
