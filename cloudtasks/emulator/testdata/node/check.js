// Checks a running `ctdispatch emulator` with Google's official Node
// libraries: @google-cloud/tasks creates a queue and an HTTP task with an
// OIDC token, a local worker receives the delivery, and google-auth-library
// verifies the token with an audience, as a worker on Cloud Run would.
//
// Environment:
//   CTDISPATCH_EMULATOR       gRPC address of the emulator (host:port)
//   CTDISPATCH_EMULATOR_HTTP  base URL of its HTTP server (keys, issuer)
//   CTDISPATCH_EMULATOR_ISSUER  the "iss" of its tokens
// Prints one "ok ..." line per check and exits 0, or prints the failure and
// exits 1.
'use strict';

// Everything stays on loopback: no probe for the GCE metadata server.
process.env.METADATA_SERVER_DETECTION ??= 'none';

const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const http = require('node:http');
const grpc = require('@grpc/grpc-js');
const {CloudTasksClient} = require('@google-cloud/tasks');
const {OAuth2Client} = require('google-auth-library');

const emulator = process.env.CTDISPATCH_EMULATOR;
const httpBase = process.env.CTDISPATCH_EMULATOR_HTTP;
const issuer = process.env.CTDISPATCH_EMULATOR_ISSUER;
const serviceAccount = 'worker@p.iam.gserviceaccount.com';
const audience = 'https://worker.example.com/node';

function withTimeout(promise, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: nothing after ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

// startWorker listens on loopback and resolves `delivered` with the first
// request it receives.
function startWorker() {
  let resolve;
  const delivered = new Promise(r => (resolve = r));
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', c => chunks.push(c));
    req.on('end', () => {
      res.writeHead(200).end('done');
      resolve({method: req.method, url: req.url, headers: req.headers, body: Buffer.concat(chunks)});
    });
  });
  return new Promise(r => server.listen(0, '127.0.0.1', () => r({server, delivered})));
}

async function main() {
  assert.ok(emulator && httpBase && issuer, 'set CTDISPATCH_EMULATOR, CTDISPATCH_EMULATOR_HTTP and CTDISPATCH_EMULATOR_ISSUER');
  const [host, port] = [emulator.slice(0, emulator.lastIndexOf(':')), Number(emulator.slice(emulator.lastIndexOf(':') + 1))];
  const client = new CloudTasksClient({servicePath: host, port, sslCreds: grpc.credentials.createInsecure()});
  const {server, delivered} = await startWorker();
  try {
    const location = 'projects/p/locations/europe-west1';
    const queueId = 'node-' + crypto.randomBytes(4).toString('hex');
    const queueName = `${location}/queues/${queueId}`;
    const [queue] = await client.createQueue({parent: location, queue: {name: queueName}});
    assert.equal(queue.name, queueName);
    assert.equal(queue.state, 'RUNNING');
    assert.equal(queue.rateLimits.maxBurstSize, 100);
    console.log(`ok createQueue ${queueName} (maxBurstSize ${queue.rateLimits.maxBurstSize})`);

    const workerURL = `http://127.0.0.1:${server.address().port}/work`;
    const taskName = `${queueName}/tasks/d_node_check`;
    const body = JSON.stringify({from: 'node'});
    const [task] = await client.createTask({
      parent: queueName,
      task: {
        name: taskName,
        httpRequest: {
          url: workerURL,
          httpMethod: 'POST',
          body: Buffer.from(body),
          headers: {'Content-Type': 'application/json', Host: 'spoofed.example.com', 'X-Google-Spoof': 'yes', 'X-AppEngine-Spoof': 'yes'},
          oidcToken: {serviceAccountEmail: serviceAccount, audience},
        },
      },
    });
    assert.equal(task.name, taskName);
    console.log(`ok createTask ${taskName}`);

    const got = await withTimeout(delivered, 30000, 'delivery');
    assert.equal(got.method, 'POST');
    assert.equal(got.url, '/work');
    assert.equal(got.body.toString(), body);
    assert.equal(got.headers['host'], `127.0.0.1:${server.address().port}`);
    assert.equal(got.headers['content-length'], String(Buffer.byteLength(body)));
    assert.equal(got.headers['content-type'], 'application/json');
    assert.equal(got.headers['user-agent'], 'Google-Cloud-Tasks');
    assert.equal(got.headers['x-cloudtasks-queuename'], queueId);
    assert.equal(got.headers['x-cloudtasks-taskname'], 'd_node_check');
    assert.equal(got.headers['x-cloudtasks-taskretrycount'], '0');
    assert.equal(got.headers['x-google-spoof'], undefined);
    assert.equal(got.headers['x-appengine-spoof'], undefined);
    console.log('ok delivery with the service headers, Host from the URL and no X-Google-*/X-AppEngine-*');

    const authz = got.headers['authorization'] || '';
    assert.match(authz, /^Bearer /);
    const idToken = authz.slice('Bearer '.length);
    const verifier = new OAuth2Client({
      endpoints: {oauth2FederatedSignonPemCertsUrl: `${httpBase}/oauth2/v1/certs`},
      issuers: [issuer],
    });
    const ticket = await verifier.verifyIdToken({idToken, audience});
    const claims = ticket.getPayload();
    assert.equal(claims.aud, audience);
    assert.equal(claims.email, serviceAccount);
    assert.equal(claims.email_verified, true);
    assert.equal(claims.iss, issuer);
    await assert.rejects(verifier.verifyIdToken({idToken, audience: 'https://someone-else.example.com'}), /Wrong recipient/);
    console.log(`ok verifyIdToken audience ${audience} email ${claims.email}`);

    const [queues] = await client.listQueues({parent: location, filter: 'state: PAUSED'});
    assert.ok(!queues.some(q => q.name === queueName), 'a running queue is not listed as paused');
    await client.pauseQueue({name: queueName});
    const [paused] = await client.listQueues({parent: location, filter: 'state: PAUSED'});
    assert.ok(paused.some(q => q.name === queueName), 'the paused queue is listed');
    console.log('ok listQueues filter state: PAUSED');

    const locations = [];
    for await (const l of client.listLocationsAsync({name: 'projects/p'}, {autoPaginate: false})) {
      locations.push(l.name);
    }
    assert.ok(locations.includes(location), `listLocations lists ${location}: ${locations}`);
    const [loc] = await client.getLocation({name: location});
    assert.equal(loc.locationId, 'europe-west1');
    await assert.rejects(client.listQueues({parent: location, pageToken: 'bm90LWEtdG9rZW4'}), /INVALID_ARGUMENT|3 /);
    console.log('ok listLocations, getLocation, a forged page token refused');

    const [policy] = await client.getIamPolicy({resource: queueName});
    const [set] = await client.setIamPolicy({
      resource: queueName,
      policy: {etag: policy.etag, bindings: [{role: 'roles/cloudtasks.enqueuer', members: [`serviceAccount:${serviceAccount}`]}]},
    });
    const [again] = await client.getIamPolicy({resource: queueName});
    assert.deepEqual(Buffer.from(again.etag), Buffer.from(set.etag));
    assert.equal(again.bindings[0].role, 'roles/cloudtasks.enqueuer');
    const [perms] = await client.testIamPermissions({resource: queueName, permissions: ['cloudtasks.tasks.create']});
    assert.deepEqual(perms.permissions, ['cloudtasks.tasks.create']);
    console.log('ok getIamPolicy/setIamPolicy/testIamPermissions');

    await client.deleteQueue({name: queueName});
  } finally {
    server.close();
    await client.close();
  }
}

main().then(
  () => console.log('PASS node client check'),
  err => {
    console.error(`FAIL node client check: ${err.stack || err}`);
    process.exit(1);
  },
);
