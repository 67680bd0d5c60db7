// Starts kinesalite (in-memory) on 127.0.0.1 only, with no create/update/delete delays, room for 2,048 shards.
// Usage: node server.js PORT ; prints "ready PORT" once listening. Its own CLI binds every interface.
// A test double must outlive a misbehaving client: errors are logged to stderr, not fatal.
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
