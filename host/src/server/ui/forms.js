// The console's forms made from JSON Schemas: fields for what a schema describes simply, JSON
// for the rest, and the busy state of a submit.
'use strict';

(() => {
  const { h, pretty, jsonBlock, errorBox, showError, clearError } = self.weft;

  /** A value a field cannot take, with the field to focus. */
  class FieldError extends Error {
    constructor(message, field) {
      super(message);
      this.field = field;
    }
  }

  /** The one type a schema gives, `enum` for enumerations, `null` when it is not that simple. */
  function typeOf(schema) {
    if (!schema || typeof schema !== 'object' || Array.isArray(schema)) return null;
    if (Array.isArray(schema.enum) && schema.enum.length) return 'enum';
    let t = schema.type;
    if (Array.isArray(t)) {
      const some = t.filter((x) => x !== 'null');
      t = some.length === 1 ? some[0] : null;
    }
    if (!t && schema.properties && typeof schema.properties === 'object') return 'object';
    return typeof t === 'string' ? t : null;
  }

  /** Whether the form generator can show an object schema as fields. */
  function formable(schema) {
    return typeOf(schema) === 'object'
      && schema.properties && typeof schema.properties === 'object'
      && Object.keys(schema.properties).length > 0
      && !schema.oneOf && !schema.anyOf && !schema.allOf && !schema.$ref;
  }

  /** The fields of an object schema: `{el, read(lenient), set(value), names}`. */
  function objectFields(schema, initial, base, depth) {
    const required = new Set(Array.isArray(schema.required) ? schema.required : []);
    const fields = Object.entries(schema.properties).map(([name, sub], i) => [
      name,
      field(name, sub, required.has(name), initial && typeof initial === 'object' ? initial[name] : undefined,
        `${base}-${i}-${name.replace(/[^A-Za-z0-9_-]/g, '_')}`, depth),
    ]);
    return {
      el: h('div', { class: 'fields' }, fields.map(([, f]) => f.el)),
      names: new Set(fields.map(([n]) => n)),
      read(lenient) {
        const out = {};
        for (const [name, f] of fields) {
          const r = f.read(lenient);
          if (r.present) out[name] = r.value;
        }
        return out;
      },
      set(value) {
        for (const [name, f] of fields) f.set(value && typeof value === 'object' ? value[name] : undefined);
      },
    };
  }

  /** One field for property `name` of type `schema`. */
  function field(name, schema, required, initial, id, depth) {
    const t = typeOf(schema);
    const s = schema && typeof schema === 'object' ? schema : {};
    const start = initial !== undefined ? initial : s.default;
    const title = typeof s.title === 'string' && s.title ? s.title : name;
    const hintId = typeof s.description === 'string' ? `${id}-hint` : null;
    const hint = hintId ? h('span', { class: 'hint', id: hintId }, s.description) : null;
    const label = (forId) => h('label', { for: forId }, title,
      required ? h('span', { class: 'req' }, ' (required)') : null);
    const missing = (el) => new FieldError(`${title} is required.`, el);
    const wrap = (...kids) => h('div', { class: 'field' }, ...kids);

    if (t === 'object' && formable(s) && depth < 4) {
      const inner = objectFields(s, start, id, depth + 1);
      return {
        el: h('fieldset', { class: 'field nested' },
          h('legend', null, title, required ? h('span', { class: 'req' }, ' (required)') : null), hint, inner.el),
        read(lenient) {
          const v = inner.read(lenient);
          return { present: required || Object.keys(v).length > 0, value: v };
        },
        set(v) { inner.set(v); },
      };
    }
    if (t === 'boolean' && required) {
      const box = h('input', { id, type: 'checkbox', name, 'aria-describedby': hintId });
      const set = (v) => { box.checked = v === true; };
      set(start);
      return {
        el: wrap(h('div', { class: 'check' }, box, label(id)), hint),
        read: () => ({ present: true, value: box.checked }),
        set,
      };
    }
    if (t === 'enum' || t === 'boolean') {
      const choices = t === 'enum' ? s.enum : [true, false];
      const select = h('select', { id, name, 'aria-describedby': hintId },
        required && t === 'enum' ? null : h('option', { value: '' }, '— not set —'),
        choices.map((c, i) => h('option', { value: String(i) }, typeof c === 'string' ? c : JSON.stringify(c))));
      const set = (v) => {
        const i = choices.findIndex((c) => JSON.stringify(c) === JSON.stringify(v));
        select.value = i >= 0 ? String(i) : (select.options[0] ? select.options[0].value : '');
      };
      set(start);
      return {
        el: wrap(label(id), select, hint),
        read(lenient) {
          if (select.value === '') {
            if (required && !lenient) throw missing(select);
            return { present: false };
          }
          return { present: true, value: choices[Number(select.value)] };
        },
        set,
      };
    }
    if (t === 'string' || t === 'number' || t === 'integer') {
      const numeric = t !== 'string';
      const input = h('input', {
        id, name, type: numeric ? 'number' : 'text', step: t === 'integer' ? '1' : (numeric ? 'any' : null),
        min: typeof s.minimum === 'number' ? s.minimum : null,
        max: typeof s.maximum === 'number' ? s.maximum : null,
        'aria-describedby': hintId, autocomplete: 'off', spellcheck: numeric ? null : 'false',
      });
      const set = (v) => { input.value = v === undefined || v === null ? '' : (typeof v === 'object' ? JSON.stringify(v) : String(v)); };
      set(start);
      return {
        el: wrap(label(id), input, hint),
        read(lenient) {
          const raw = input.value;
          if (raw === '' || (numeric && raw.trim() === '')) {
            if (required && !lenient) throw missing(input);
            return { present: false };
          }
          if (!numeric) return { present: true, value: raw };
          const n = Number(raw);
          if (!Number.isFinite(n)) throw new FieldError(`${title} must be a number.`, input);
          if (t === 'integer' && !Number.isInteger(n)) throw new FieldError(`${title} must be a whole number.`, input);
          return { present: true, value: n };
        },
        set,
      };
    }
    // Anything else (arrays, unions, free objects): the field takes JSON.
    const area = h('textarea', {
      id, name, rows: '3', class: 'mono', spellcheck: 'false',
      'aria-describedby': [`${id}-as-json`, hintId].filter(Boolean).join(' '),
    });
    const set = (v) => { area.value = v === undefined ? '' : pretty(v); };
    set(start);
    return {
      el: wrap(label(id), area, h('span', { class: 'hint', id: `${id}-as-json` }, 'as JSON'), hint),
      read(lenient) {
        const raw = area.value.trim();
        if (!raw) {
          if (required && !lenient) throw missing(area);
          return { present: false };
        }
        try {
          return { present: true, value: JSON.parse(raw) };
        } catch (e) {
          throw new FieldError(`${title} is not valid JSON: ${e.message}`, area);
        }
      },
      set,
    };
  }

  /** An editor of a JSON value for `schema`: generated fields when the schema allows, with a
   *  switch to raw JSON; only a JSON textarea when it does not. `{el, read(lenient), set}`. */
  function inputEditor(schema, initial, base, what) {
    const form = formable(schema) ? objectFields(schema, initial, base, 0) : null;
    let mode = form ? 'form' : 'json';
    const areaId = `${base}-json`;
    const area = h('textarea', { id: areaId, rows: '6', class: 'mono', spellcheck: 'false' });
    area.value = pretty(initial !== undefined ? initial : (form ? safeRead(form) : {}));
    const problem = errorBox();
    const jsonPart = h('div', { class: 'field json-edit', hidden: mode !== 'json' },
      h('label', { for: areaId }, `${what} as JSON`), area);
    const formPart = form ? h('div', { class: 'form-part' }, form.el) : null;
    const toggle = form
      ? h('button', { type: 'button', class: 'link-button', 'aria-controls': areaId }, 'Edit as JSON')
      : null;
    if (toggle) {
      toggle.addEventListener('click', () => {
        clearError(problem);
        try {
          if (mode === 'form') {
            area.value = pretty(form.read(true));
            mode = 'json';
          } else {
            const v = area.value.trim() ? JSON.parse(area.value) : {};
            if (!v || typeof v !== 'object' || Array.isArray(v)) throw new Error(`the form needs a JSON object`);
            const extra = Object.keys(v).filter((k) => !form.names.has(k));
            if (extra.length) throw new Error(`the form has no field for ${extra.join(', ')}; keep editing JSON`);
            form.set(v);
            mode = 'form';
          }
        } catch (e) {
          showError(problem, e);
          return;
        }
        jsonPart.hidden = mode !== 'json';
        formPart.hidden = mode !== 'form';
        toggle.textContent = mode === 'form' ? 'Edit as JSON' : 'Edit as form';
        const first = (mode === 'form' ? formPart : jsonPart).querySelector('input, select, textarea');
        if (first) first.focus();
      });
    }
    const schemaView = schema && typeof schema === 'object'
      ? h('details', { class: 'schema' }, h('summary', null, `${what} schema`), jsonBlock(schema, `${what} schema`))
      : null;
    const note = form ? null : h('p', { class: 'hint' }, schema
      ? `The form cannot show this schema as fields: type the ${what.toLowerCase()} as JSON.`
      : `No schema describes the ${what.toLowerCase()}: type it as JSON.`);
    return {
      el: h('div', { class: 'editor' }, note, formPart, jsonPart, toggle, problem, schemaView),
      read(lenient) {
        if (mode === 'form') return form.read(lenient);
        const raw = area.value.trim();
        if (!raw) return {};
        try {
          return JSON.parse(raw);
        } catch (e) {
          throw new FieldError(`The ${what.toLowerCase()} is not valid JSON: ${e.message}`, area);
        }
      },
    };
  }

  function safeRead(form) {
    try { return form.read(true); } catch { return {}; }
  }

  /** Runs `action` for a form's submit button: busy while it runs, its error shown in `box`. */
  async function busy(button, box, scope, action) {
    clearError(box, scope);
    const label = button.textContent;
    const buttons = scope ? [...scope.querySelectorAll('button')] : [button];
    for (const b of buttons) b.disabled = true;
    button.textContent = `${label}…`;
    try {
      await action();
    } catch (e) {
      showError(box, e);
    } finally {
      button.textContent = label;
      for (const b of buttons) b.disabled = false;
    }
  }


  Object.assign(self.weft, { FieldError, typeOf, formable, inputEditor, busy });
})();
