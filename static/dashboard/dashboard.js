// minibase dashboard: the little that plain forms cannot do. No inline script anywhere (the
// Content-Security-Policy forbids it); everything here is progressive: the pages work without it.
"use strict";

document.addEventListener("click", async (event) => {
  // <button data-copy="ID" hidden>: copy the value of the field with that id (a signed URL). The
  // button is hidden until this script runs, so that nobody clicks one that would do nothing.
  const button = event.target.closest("button[data-copy]");
  if (!button) return;
  const field = document.getElementById(button.dataset.copy);
  if (!field) return;
  field.select();
  try {
    await navigator.clipboard.writeText(field.value);
    button.textContent = "Copied";
  } catch {
    button.textContent = "Select and copy it";
  }
});
for (const button of document.querySelectorAll("button[data-copy]")) button.hidden = false;

document.addEventListener("submit", (event) => {
  // <form data-confirm="TEXT">: ask before a change that cannot be undone.
  const text = event.target.dataset.confirm;
  if (text && !window.confirm(text)) event.preventDefault();
});

// <button data-key-options=URL data-key=URL>: the second step with a security key or passkey. The
// server's request options go to the browser's WebAuthn, its answer back; the button is hidden
// until this script runs.
async function postForm(url, fields) {
  const body = new FormData();
  for (const [name, value] of Object.entries(fields)) body.append(name, value);
  const answer = await fetch(url, { method: "POST", body, credentials: "same-origin" });
  const said = await answer.json().catch(() => ({ error: "Reload the page and try again." }));
  if (!answer.ok) throw new Error(said.error);
  return said;
}

document.addEventListener("click", async (event) => {
  const button = event.target.closest("button[data-key-options]");
  if (!button) return;
  const shown = document.getElementById("key-error");
  const { csrf, next } = button.dataset;
  button.disabled = true;
  try {
    const asked = await postForm(button.dataset.keyOptions, { csrf });
    const publicKey = PublicKeyCredential.parseRequestOptionsFromJSON(asked.options);
    const credential = await navigator.credentials.get({ publicKey });
    const answered = await postForm(button.dataset.key, {
      csrf, next, factor_id: asked.factor_id, challenge_id: asked.challenge_id,
      credential: JSON.stringify(credential.toJSON()),
    });
    window.location.assign(answered.next);
  } catch (error) {
    shown.textContent = error.message || "The security key did not answer.";
    shown.hidden = false;
    button.disabled = false;
  }
});
for (const button of document.querySelectorAll("button[data-key-options]")) button.hidden = false;
