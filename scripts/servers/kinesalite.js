#!/usr/bin/env node
// Starts kinesalite (a local Kinesis Data Streams server) on 127.0.0.1.
// Usage: node kinesalite.js PORT
//
// Streams become ACTIVE at once (no CREATING/UPDATING/DELETING delay) and the
// shard limit is raised so tests can create many multi-shard streams.
'use strict';

const port = Number(process.argv[2]);
if (!Number.isInteger(port) || port <= 0 || port > 65535) {
  console.error('usage: node kinesalite.js PORT');
  process.exit(2);
}

// Like dynalite, kinesalite throws when a client goes away in the middle of
// a request (a job killed by a crash test); log it and go on.
process.on('uncaughtException', (err) => {
  if (err && (err.code === 'ECONNRESET' || err.code === 'EPIPE' || err.message === 'aborted')) {
    console.error('kinesalite: client went away mid-request (%s); going on', err.code || err.message);
    return;
  }
  console.error('kinesalite: ' + (err && err.stack ? err.stack : err));
  process.exit(1);
});

const server = require('kinesalite')({
  createStreamMs: 0,
  deleteStreamMs: 0,
  updateStreamMs: 0,
  shardLimit: 10000,
});

server.on('error', (err) => {
  console.error('kinesalite: ' + err.message);
  process.exit(1);
});

server.listen(port, '127.0.0.1', () => {
  const a = server.address();
  console.log('kinesalite listening at http://%s:%d', a.address, a.port);
});

for (const sig of ['SIGINT', 'SIGTERM']) {
  process.on(sig, () => process.exit(0));
}
