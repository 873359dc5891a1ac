import tseslint from "typescript-eslint"

/**
 * The public modules are the files directly under src/ (src/Producer.ts, src/ReliableSystem.ts...).
 * The controllers and every internal module sit below them and must not import them back: what
 * they share with the public modules lives in src/internal/ (e.g. `SystemInternals`).
 */
const noUpwardImports = (publicModule) => ({
  "no-restricted-imports": ["error", {
    patterns: [{
      regex: publicModule,
      message: "Controllers and internal modules must not import the public modules under src/; move what they need into src/internal/."
    }]
  }]
})

export default tseslint.config(
  { ignores: ["dist/**", "node_modules/**", "coverage/**", ".bench-build/**", ".bench-tmp/**"] },
  ...tseslint.configs.recommended,
  {
    rules: {
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_" }],
      "@typescript-eslint/no-explicit-any": "off",
      "@typescript-eslint/no-namespace": "off",
      "@typescript-eslint/no-empty-object-type": "off",
      "no-constant-condition": "off"
    }
  },
  // A function a reader can take in at once (blank lines and comments not counted).
  { files: ["src/**/*.ts"], rules: { "max-lines-per-function": ["warn", { max: 100, skipBlankLines: true, skipComments: true }] } },
  { files: ["src/Controller/*.ts", "src/internal/*.ts"], rules: noUpwardImports("^\\.\\./[^/]+$") },
  { files: ["src/*/internal/*.ts"], rules: noUpwardImports("^\\.\\./\\.\\./[^/]+$") }
)
