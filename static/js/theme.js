// The night theme: the header's toggle sets data-theme on <html> and remembers it on this browser; without a
// choice the system's preference (prefers-color-scheme) decides. Loaded in <head>, before the page paints.
(function () {
  const KEY = "triage-theme";
  const saved = localStorage.getItem(KEY);
  if (saved === "dark" || saved === "light") document.documentElement.dataset.theme = saved;

  function current() {
    const chosen = document.documentElement.dataset.theme;
    if (chosen) return chosen;
    return window.matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light";
  }

  document.addEventListener("DOMContentLoaded", () => {
    const button = document.getElementById("theme-toggle");
    if (!button) return;
    const label = () => {
      const dark = current() === "dark";
      button.textContent = dark ? "Day theme" : "Night theme";
      button.setAttribute("aria-pressed", String(dark));
    };
    label();
    button.addEventListener("click", () => {
      const next = current() === "dark" ? "light" : "dark";
      document.documentElement.dataset.theme = next;
      localStorage.setItem(KEY, next);
      label();
    });
  });
})();
