/**
 * GET /docs: a self-contained reference page rendered in the browser from /openapi.json.
 * No external scripts or fonts, so it works on a machine with no network.
 */
export const docsPage = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Tollgate API reference</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
  body { font: 15px/1.5 system-ui, sans-serif; margin: 0; color: #1d2330; background: #fafbfc; }
  header { background: #1d2330; color: #fff; padding: 18px 32px; }
  header h1 { margin: 0; font-size: 22px; }
  main { max-width: 980px; margin: 0 auto; padding: 16px 32px 64px; }
  .op { background: #fff; border: 1px solid #dde1e8; border-radius: 8px; margin: 14px 0; padding: 12px 16px; }
  .method { display: inline-block; min-width: 56px; font-weight: 700; font-family: ui-monospace, monospace; }
  .get { color: #0b7a3e; } .post { color: #a35200; } .patch { color: #6b3fa0; }
  .path { font-family: ui-monospace, monospace; font-weight: 600; }
  .statuses { margin-top: 6px; font-size: 13px; color: #4a5263; }
  .status { display: inline-block; margin-right: 10px; }
  code { background: #eef1f5; padding: 1px 4px; border-radius: 4px; }
  #error { color: #b00020; }
</style>
</head>
<body>
<header><h1>Tollgate API reference</h1><div id="summary">Loading /openapi.json…</div></header>
<main><p id="error"></p><div id="ops"></div></main>
<script>
fetch("/openapi.json").then(r => r.json()).then(spec => {
  document.getElementById("summary").textContent = spec.info.title + " " + spec.info.version + " — OpenAPI " + spec.openapi
  const ops = document.getElementById("ops")
  for (const [path, item] of Object.entries(spec.paths)) {
    for (const [method, op] of Object.entries(item)) {
      const div = document.createElement("div")
      div.className = "op"
      div.dataset.path = path
      const statuses = Object.entries(op.responses || {}).map(([code, r]) =>
        '<span class="status"><code>' + code + '</code> ' + (r.description || "") + '</span>').join("")
      div.innerHTML = '<span class="method ' + method + '">' + method.toUpperCase() + '</span> <span class="path"></span>' +
        '<div class="summary"></div><div class="statuses">' + statuses + '</div>'
      div.querySelector(".path").textContent = path
      div.querySelector(".summary").textContent = op.description || op.summary || op.operationId || ""
      ops.appendChild(div)
    }
  }
}).catch(e => { document.getElementById("error").textContent = "Could not load /openapi.json: " + e })
</script>
</body>
</html>
`
