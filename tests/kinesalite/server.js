// Starts kinesalite (in-memory) on 127.0.0.1 only, with no create/update/delete delays, room for 2,048 shards.
// Usage: node server.js PORT ; prints "ready PORT" once listening. Its own CLI binds every interface.
// A test double must outlive a misbehaving client: errors are logged to stderr, not fatal.
//
// GetRecords and GetShardIterator read the stream's description through a cache. kinesalite reads it
// from its store and parses it as JSON on every call: about 6 ms of CPU per call at 1,024 shards, which
// made the emulator, not the client, the cost a many-shard benchmark measured. Both calls only read the
// description; the cache holds the parsed copy until any write to the stream's metadata (a put, a
// split or merge, retention, tags, deletion), so what they answer is unchanged.
const path = require('path')
const db = require('kinesalite/db')

const cachedReads = ['getRecords', 'getShardIterator']

const createStore = db.create
db.create = function (options) {
  const store = createStore(options)
  const cache = new Map()
  let writes = 0 // started, so a read that overlapped one is not cached
  let pending = 0 // not yet done
  for (const write of ['put', 'del']) {
    const original = store.metaDb[write].bind(store.metaDb)
    store.metaDb[write] = function (name, ...args) {
      const cb = args.pop()
      writes++
      pending++
      cache.delete(name)
      return original(name, ...args, function (...result) {
        pending--
        cache.delete(name)
        cb(...result)
      })
    }
  }
  store.getStreamCached = function (name, cb) {
    if (cache.has(name)) return process.nextTick(cb, null, cache.get(name))
    const before = writes
    store.getStream(name, function (err, stream) {
      if (!err && pending === 0 && writes === before) cache.set(name, stream)
      cb(err, stream)
    })
  }
  return store
}

const actions = path.join(path.dirname(require.resolve('kinesalite/db')), '..', 'actions')
for (const name of cachedReads) {
  const file = require.resolve(path.join(actions, name))
  const action = require(file)
  require.cache[file].exports = function (store, data, cb) {
    return action(Object.assign(Object.create(store), { getStream: store.getStreamCached }), data, cb)
  }
}

const kinesalite = require('kinesalite')
const port = parseInt(process.argv[2] || '4567', 10)
const log = (...args) => console.error(new Date().toISOString(), ...args)
const server = kinesalite({ createStreamMs: 0, deleteStreamMs: 0, updateStreamMs: 0, shardLimit: 2048 })
server.on('clientError', (err, socket) => { log('client error:', err.code || err.message); socket.destroy() })
process.on('uncaughtException', (err) => log('uncaught exception:', (err && err.stack) || err))
process.on('unhandledRejection', (err) => log('unhandled rejection:', (err && err.stack) || err))
process.on('exit', (code) => log('exiting with code', code))
process.on('SIGTERM', () => { log('SIGTERM'); server.close(() => process.exit(0)) })
server.listen(port, '127.0.0.1', () => console.log('ready ' + server.address().port))
