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
