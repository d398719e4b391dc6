// Opened from disk (file://, `das docs --no-serve`), a browser refuses the web worker and the
// index file the search box needs: instead of a search box that never answers, the header says
// where search works.
document.addEventListener("DOMContentLoaded", function () {
  if (window.location.protocol !== "file:") {
    return;
  }
  var note = document.createElement("div");
  note.className = "das-file-note";
  note.textContent = "Search: run das docs (a browser blocks it in pages opened from disk)";
  var search = document.querySelector(".md-search");
  if (search) {
    search.replaceWith(note);
  } else {
    var header = document.querySelector(".md-header__inner");
    if (header) {
      header.appendChild(note);
    }
  }
  var toggle = document.querySelector("label.md-header__button[for='__search']");
  if (toggle) {
    toggle.remove();
  }
});
