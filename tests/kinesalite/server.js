// Starts kinesalite (in-memory) on 127.0.0.1 only, with no create/update/delete delays.
// Usage: node server.js PORT ; prints "ready PORT" once listening. Its own CLI binds every interface.
const kinesalite = require('kinesalite')
const port = parseInt(process.argv[2] || '4567', 10)
const server = kinesalite({ createStreamMs: 0, deleteStreamMs: 0, updateStreamMs: 0, shardLimit: 1000 })
server.listen(port, '127.0.0.1', () => console.log('ready ' + server.address().port))
process.on('SIGTERM', () => server.close(() => process.exit(0)))
