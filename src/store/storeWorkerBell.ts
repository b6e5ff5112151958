/**
 * The store worker's doorbell (docs/decisions/0023): a counter in shared memory that the main thread
 * rings after it posts a message, and that the idle worker sleeps on in `Atomics.wait` instead of in
 * its event loop. A wake through the bell skips the worker's event loop and its 'message' event
 * dispatch; the worker then reads its port with `receiveMessageOnPort`. The messages themselves still
 * travel on the port, in order; the bell only says "look".
 */

/** A fresh bell, for one worker's life (passed to it in its workerData). */
export const makeBell = (): Int32Array => new Int32Array(new SharedArrayBuffer(4))

/** After posting: count the ring (a sleeper compares it) and wake the worker if it sleeps. */
export const ring = (bell: Int32Array): void => {
  Atomics.add(bell, 0, 1)
  Atomics.notify(bell, 0)
}
