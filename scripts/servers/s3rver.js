#!/usr/bin/env node
// Starts s3rver (a local S3 server) on 127.0.0.1.
// Usage: node s3rver.js DIR PORT
//
// S3 makes a PUT atomic: a reader sees the old object or the whole new one,
// and a PUT whose client goes away before its body is complete stores
// nothing. s3rver 3.7 truncates the object file as the request starts and
// streams the body into it, so a client killed mid-upload (the crash tests
// kill jobs with SIGKILL while they write checkpoints) leaves the object
// cut short for good, and a read during a PUT sees a partial object. Here
// the body goes to a temporary file, which replaces the object only once
// the request is complete. Everything else is s3rver's own.
'use strict';

const crypto = require('crypto');
const path = require('path');
const { Transform } = require('stream');
const fs = require('fs-extra');
const S3rver = require('s3rver');
const FilesystemStore = require('s3rver/lib/stores/filesystem');

const [dir, portArg] = process.argv.slice(2);
const port = Number(portArg);
if (!dir || !Number.isInteger(port) || port <= 0 || port > 65535) {
  console.error('usage: node s3rver.js DIR PORT');
  process.exit(2);
}

FilesystemStore.prototype.putObject = async function putObject(object) {
  const objectPath = this.getResourcePath(object.bucket, object.key, 'object');
  await fs.mkdirp(path.dirname(objectPath));
  const tmp = `${objectPath}.${crypto.randomBytes(8).toString('hex')}.part`;
  let size, md5;
  try {
    [size, md5] = await new Promise((resolve, reject) => {
      const hash = crypto.createHash('md5');
      const out = fs.createWriteStream(tmp).on('error', reject);
      const src = object.content;
      if (Buffer.isBuffer(src)) {
        hash.update(src);
        out.on('finish', () => resolve([src.length, hash.digest('hex')]));
        out.end(src);
        return;
      }
      let n = 0;
      // A request whose client went away ends without being complete.
      const cut = () => {
        if (src.complete === false) reject(new Error('upload aborted before its body was complete'));
      };
      src.on('error', reject).on('aborted', cut).on('close', cut);
      out.on('finish', () => {
        if (src.complete === false) return reject(new Error('upload aborted before its body was complete'));
        resolve([n, hash.digest('hex')]);
      });
      src
        .pipe(new Transform({
          transform(chunk, encoding, callback) {
            hash.update(chunk, encoding);
            n += chunk.length;
            callback(null, chunk);
          },
        }))
        .on('error', reject)
        .pipe(out);
    });
  } catch (err) {
    await fs.remove(tmp);
    throw err;
  }
  await fs.rename(tmp, objectPath);
  await this.putMetadata(object.bucket, object.key, object.metadata, md5);
  return { size, md5 };
};

fs.ensureDirSync(dir);
new S3rver({ directory: dir, address: '127.0.0.1', port, silent: false })
  .run()
  .then(({ address, port: p }) => console.log('S3rver listening on %s:%d', address, p))
  .catch((err) => {
    console.error('s3rver: ' + (err && err.stack ? err.stack : err));
    process.exit(1);
  });
