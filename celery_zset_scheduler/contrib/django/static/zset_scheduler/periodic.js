// The periodic entry form: only the fields of the chosen schedule type are shown (without
// JavaScript every type's fields are, and the server uses the chosen type's).
"use strict";
document.addEventListener("DOMContentLoaded", () => {
    const radios = document.querySelectorAll("input[name=schedule_type]");
    const show = () => {
        const chosen = document.querySelector("input[name=schedule_type]:checked");
        for (const fieldset of document.querySelectorAll("fieldset.zset-schedule")) {
            fieldset.hidden = chosen !== null && fieldset.dataset.schedule !== chosen.value;
        }
    };
    for (const radio of radios) {
        radio.addEventListener("change", show);
    }
    show();
});
